package routes

import (
	"slices"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/shardcache/shardcache/proto/shardcache/v1"
)

func epoch(n uint64, ids ...string) *pb.RingEpoch {
	e := &pb.RingEpoch{Epoch: n}
	for _, id := range ids {
		e.Members = append(e.Members, &pb.Member{Id: id, PeerAddress: id + ":1", JoinedAt: timestamppb.New(time.Unix(1, 0))})
	}
	return e
}

func TestNextKeepsWhereKeysWere(t *testing.T) {
	t0 := time.Unix(100, 0)
	// A new ring's first epoch: every node as cold as this one.
	rt, again, err := Next(nil, epoch(1, "a", "b"), "a", t0)
	if err != nil || again || rt.Prev != nil {
		t.Fatalf("first epoch of a new ring: prev %v again %v err %v; want no previous", rt.Prev, again, err)
	}
	// Joining a running ring: the keys were where the ring without this node put them.
	rt, _, _ = Next(nil, epoch(5, "a", "b", "c"), "c", t0)
	if rt.Prev == nil || rt.Prev.Member("c") || !rt.Prev.Member("a") {
		t.Fatalf("joining at epoch 5: prev %+v; want the ring without c", rt.Prev)
	}
	// The same epoch again (a new session): the previous and the time stay.
	again1, again, _ := Next(rt, epoch(5, "a", "b", "c"), "c", t0.Add(time.Minute))
	if !again || again1.Prev != rt.Prev || !again1.Applied.Equal(t0) {
		t.Fatalf("epoch 5 again: again %v, prev kept %v, applied %v; want the first application's", again, again1.Prev == rt.Prev, again1.Applied)
	}
	// The next epoch: the previous is the last one, holding no chain.
	next, again, _ := Next(rt, epoch(6, "a", "c"), "c", t0.Add(time.Hour))
	if again || next.Prev == nil || next.Prev.Epoch.GetEpoch() != 5 || next.Prev.Prev != nil || !next.Applied.Equal(t0.Add(time.Hour)) {
		t.Fatalf("epoch 6: %+v; want epoch 5 as previous, without its own", next.Prev)
	}
	if _, _, err := Next(rt, &pb.RingEpoch{Epoch: 7, Members: []*pb.Member{{Id: ""}}}, "c", t0); err == nil {
		t.Fatal("an epoch with a nameless member was taken")
	}
}

func TestPeerChangeNamesJoinedAndReturned(t *testing.T) {
	old, _ := New(epoch(1, "a", "b"))
	e := epoch(2, "a", "b", "c")
	e.Members[1].JoinedAt = timestamppb.New(time.Unix(2, 0)) // b came back with a new lease
	peers, joined := PeerChange(old, e)
	if !slices.Equal(peers, []string{"a:1", "b:1", "c:1"}) || !slices.Equal(joined, []string{"b:1", "c:1"}) {
		t.Fatalf("peers %v joined %v; want all three, b and c joined", peers, joined)
	}
	if _, joined := PeerChange(nil, e); joined != nil {
		t.Fatalf("a run's first epoch: joined %v, want none", joined)
	}
}
