package session

import (
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/shardcache/shardcache/proto/shardcache/v1"
)

// epochLog is an Applier that keeps every epoch applied.
type epochLog struct {
	applier
	epochs chan *pb.RingEpoch
}

func (l *epochLog) ApplyEpoch(e *pb.RingEpoch) { l.epochs <- e }

// runEpochLog runs a session client of node id against c, sharing epochs
// through shared (nil: none), and returns the log of the epochs it applies.
func runEpochLog(t *testing.T, c *control, id string, shared *EpochCache) *epochLog {
	log := &epochLog{epochs: make(chan *pb.RingEpoch, 8)}
	cfg := Config{Addresses: []string{c.addr}, Member: &pb.Member{Id: id, PeerAddress: "127.0.0.1:9001"},
		MinBackoff: time.Millisecond, MaxBackoff: 5 * time.Millisecond, Epochs: shared}
	runClientWith(t, c, log, cfg)
	return log
}

func members(e *pb.RingEpoch) string {
	var ids []string
	for _, m := range e.GetMembers() {
		ids = append(ids, m.GetId()+"@"+m.GetPeerAddress())
	}
	return strings.Join(ids, ",")
}

// A node that says compact_pushes takes a large ring's members ahead of its
// snapshot, then epochs as changes from the one it applied; a change from
// another epoch ends the stream, and the next snapshot brings the whole ring.
func TestEpochsAsChangesAndMembersAheadOfTheSnapshot(t *testing.T) {
	m := func(id, addr string) *pb.Member { return &pb.Member{Id: id, PeerAddress: addr} }
	c := startControl(t, func(n int, stream pb.NodeService_SessionServer) error {
		if n > 1 {
			// The reconnect after the bad change: a whole epoch.
			return stream.Send(&pb.SessionResponse{Msg: &pb.SessionResponse_Snapshot{Snapshot: &pb.Snapshot{
				Epoch: &pb.RingEpoch{Epoch: 9, Members: []*pb.Member{m("z", "h:9")}}}}})
		}
		for _, part := range [][]*pb.Member{{m("a", "h:1"), m("b", "h:2")}, {m("c", "h:3")}} {
			if err := stream.Send(&pb.SessionResponse{Msg: &pb.SessionResponse_SnapshotMembers{SnapshotMembers: &pb.SnapshotMembers{Members: part}}}); err != nil {
				return err
			}
		}
		snap := &pb.Snapshot{Epoch: &pb.RingEpoch{Epoch: 1, Members: []*pb.Member{m("d", "h:4")}}}
		if err := stream.Send(&pb.SessionResponse{Msg: &pb.SessionResponse_Snapshot{Snapshot: snap}}); err != nil {
			return err
		}
		change := &pb.RingEpochChange{Epoch: 2, BaseEpoch: 1, PreviousEpoch: 1, Upserted: []*pb.Member{m("a", "h:11"), m("e", "h:5")}, Removed: []string{"c"}}
		if err := stream.Send(&pb.SessionResponse{Msg: &pb.SessionResponse_EpochChange{EpochChange: change}}); err != nil {
			return err
		}
		bad := &pb.RingEpochChange{Epoch: 4, BaseEpoch: 3, Upserted: []*pb.Member{m("x", "h:0")}}
		if err := stream.Send(&pb.SessionResponse{Msg: &pb.SessionResponse_EpochChange{EpochChange: bad}}); err != nil {
			return err
		}
		<-stream.Context().Done()
		return nil
	})
	log := runEpochLog(t, c, "node-1", nil)
	if h := c.waitHellos(t, 1)[0]; !h.GetCompactPushes() {
		t.Fatal("the hello does not say compact_pushes")
	}
	want := []string{
		"a@h:1,b@h:2,c@h:3,d@h:4",  // the members ahead, then the snapshot's
		"a@h:11,b@h:2,d@h:4,e@h:5", // c removed, a changed, e added
		"z@h:9",                    // the change from epoch 3 refused: a new snapshot
	}
	for i, w := range want {
		select {
		case e := <-log.epochs:
			if got := members(e); got != w {
				t.Fatalf("epoch %d applied with %s, want %s", i+1, got, w)
			}
		case <-time.After(time.Minute):
			t.Fatalf("epoch %d not applied within a minute", i+1)
		}
	}
}

// Sessions sharing an EpochCache hold one copy of each epoch: the second
// session at an epoch applies the first one's, from a snapshot or a change.
func TestSessionsSharingAnEpochCacheHoldOneCopy(t *testing.T) {
	m := func(id, addr string) *pb.Member { return &pb.Member{Id: id, PeerAddress: addr} }
	c := startControl(t, func(n int, stream pb.NodeService_SessionServer) error {
		snap := &pb.Snapshot{Epoch: &pb.RingEpoch{Epoch: 1, Members: []*pb.Member{m("a", "h:1"), m("b", "h:2")}}}
		if err := stream.Send(&pb.SessionResponse{Msg: &pb.SessionResponse_Snapshot{Snapshot: snap}}); err != nil {
			return err
		}
		change := &pb.RingEpochChange{Epoch: 2, BaseEpoch: 1, PreviousEpoch: 1, Upserted: []*pb.Member{m("c", "h:3")}, Removed: []string{"a"}}
		if err := stream.Send(&pb.SessionResponse{Msg: &pb.SessionResponse_EpochChange{EpochChange: change}}); err != nil {
			return err
		}
		<-stream.Context().Done()
		return nil
	})
	shared := &EpochCache{}
	var logs []*epochLog
	for _, id := range []string{"node-1", "node-2"} {
		logs = append(logs, runEpochLog(t, c, id, shared))
	}
	want := []string{"a@h:1,b@h:2", "b@h:2,c@h:3"}
	var got [2][]*pb.RingEpoch
	for i, log := range logs {
		for j, w := range want {
			select {
			case e := <-log.epochs:
				if members(e) != w {
					t.Fatalf("session %d: epoch %d applied with %s, want %s", i+1, j+1, members(e), w)
				}
				got[i] = append(got[i], e)
			case <-time.After(time.Minute):
				t.Fatalf("session %d: epoch %d not applied within a minute", i+1, j+1)
			}
		}
	}
	for j := range want {
		if got[0][j] != got[1][j] {
			t.Errorf("epoch %d: the two sessions hold two copies", j+1)
		}
	}
}

// An EpochCache keeps the newest epochCacheMax epochs: the oldest makes
// room, and an epoch older than all it keeps is not kept.
func TestAnEpochCacheKeepsTheNewestEpochs(t *testing.T) {
	c := &EpochCache{}
	for n := uint64(1); n <= epochCacheMax+2; n++ {
		c.share(&pb.RingEpoch{Epoch: n})
	}
	for n := uint64(1); n <= epochCacheMax+2; n++ {
		if kept := c.get(n) != nil; kept != (n > 2) {
			t.Errorf("epoch %d kept %v, want %v", n, kept, n > 2)
		}
	}
	old := &pb.RingEpoch{Epoch: 1}
	if c.share(old) != old || c.get(1) != nil {
		t.Error("an epoch older than all the cache keeps was kept")
	}
	if again := (&pb.RingEpoch{Epoch: 5}); c.share(again) == again {
		t.Error("a second copy of epoch 5 replaced the first")
	}
	var none *EpochCache
	if e := (&pb.RingEpoch{Epoch: 1}); none.share(e) != e || none.get(1) != nil {
		t.Error("a nil cache shares")
	}
}

// Members sent ahead of a snapshot, of an epoch the shared cache holds,
// are not kept: the snapshot takes the cache's copy. Members of another
// epoch are kept as without a cache, and a snapshot of an epoch other than
// its members' is refused.
func TestMembersOfASharedEpochAreNotKept(t *testing.T) {
	m := func(id string) *pb.Member { return &pb.Member{Id: id, PeerAddress: id + ":1"} }
	shared := &EpochCache{}
	have := shared.share(&pb.RingEpoch{Epoch: 3, Members: []*pb.Member{m("a"), m("b")}})
	c := &Client{cfg: Config{Epochs: shared}}
	if err := c.addIncoming([]*pb.Member{m("a")}, 3); err != nil || len(c.incoming) != 0 {
		t.Fatalf("members of a shared epoch: err %v, %d kept", err, len(c.incoming))
	}
	if e, err := c.withIncoming(&pb.RingEpoch{Epoch: 3}); err != nil || e != have {
		t.Fatalf("the snapshot of a shared epoch: %v, err %v; want the shared copy", members(e), err)
	}
	if err := c.addIncoming([]*pb.Member{m("c")}, 4); err != nil || len(c.incoming) != 1 {
		t.Fatalf("members of an epoch not shared: err %v, %d kept, want 1", err, len(c.incoming))
	}
	if e, err := c.withIncoming(&pb.RingEpoch{Epoch: 4, Members: []*pb.Member{m("d")}}); err != nil || members(e) != "c@c:1,d@d:1" {
		t.Fatalf("the snapshot of an epoch not shared: %s, err %v", members(e), err)
	}
	c.addIncoming([]*pb.Member{m("a")}, 3)
	if _, err := c.withIncoming(&pb.RingEpoch{Epoch: 5}); err == nil || !strings.Contains(err.Error(), "epoch 3") {
		t.Fatalf("a snapshot of epoch 5 after members of epoch 3: err %v", err)
	}
	c.addIncoming([]*pb.Member{m("a")}, 3)
	if err := c.addIncoming([]*pb.Member{m("b")}, 4); err == nil {
		t.Fatal("members of two epochs ahead of one snapshot were taken")
	}
}

// Members sent ahead of a snapshot by a session that broke before its
// snapshot are not part of the next session's ring.
func TestMembersOfABrokenSnapshotAreDropped(t *testing.T) {
	m := func(id, addr string) *pb.Member { return &pb.Member{Id: id, PeerAddress: addr} }
	c := startControl(t, func(n int, stream pb.NodeService_SessionServer) error {
		if n == 1 {
			part := &pb.SnapshotMembers{Epoch: 1, Members: []*pb.Member{m("a", "h:1"), m("b", "h:2")}}
			if err := stream.Send(&pb.SessionResponse{Msg: &pb.SessionResponse_SnapshotMembers{SnapshotMembers: part}}); err != nil {
				return err
			}
			return status.Error(codes.Unavailable, "replica going away before the snapshot")
		}
		part := &pb.SnapshotMembers{Epoch: 2, Members: []*pb.Member{m("c", "h:3")}}
		if err := stream.Send(&pb.SessionResponse{Msg: &pb.SessionResponse_SnapshotMembers{SnapshotMembers: part}}); err != nil {
			return err
		}
		snap := &pb.Snapshot{Epoch: &pb.RingEpoch{Epoch: 2}}
		if err := stream.Send(&pb.SessionResponse{Msg: &pb.SessionResponse_Snapshot{Snapshot: snap}}); err != nil {
			return err
		}
		<-stream.Context().Done()
		return nil
	})
	log := runEpochLog(t, c, "node-1", nil)
	select {
	case e := <-log.epochs:
		if got := members(e); got != "c@h:3" {
			t.Fatalf("epoch %d applied with %s, want c@h:3 alone", e.GetEpoch(), got)
		}
	case <-time.After(time.Minute):
		t.Fatal("no epoch applied within a minute")
	}
}

// A node says in its hello which epoch it holds, number and created_at. A
// snapshot that leaves that epoch's members out is taken with the ring the
// node has, and a change from it follows; a snapshot that says the node
// holds an epoch it does not ends the stream, and the next hello asks for
// the members.
func TestASnapshotOfAHeldEpochKeepsTheNodesRing(t *testing.T) {
	m := func(id string) *pb.Member { return &pb.Member{Id: id, PeerAddress: id + ":1"} }
	t5, t6 := timestamppb.New(time.Unix(5, 0)), timestamppb.New(time.Unix(6, 0))
	send := func(stream pb.NodeService_SessionServer, msgs ...*pb.SessionResponse) error {
		for _, msg := range msgs {
			if err := stream.Send(msg); err != nil {
				return err
			}
		}
		return status.Error(codes.Unavailable, "replica restarting")
	}
	snapshot := func(s *pb.Snapshot) *pb.SessionResponse {
		return &pb.SessionResponse{Msg: &pb.SessionResponse_Snapshot{Snapshot: s}}
	}
	c := startControl(t, func(n int, stream pb.NodeService_SessionServer) error {
		switch n {
		case 1:
			return send(stream, snapshot(&pb.Snapshot{Epoch: &pb.RingEpoch{Epoch: 5, CreatedAt: t5, Members: []*pb.Member{m("a"), m("b")}}}))
		case 2:
			return send(stream, snapshot(&pb.Snapshot{Epoch: &pb.RingEpoch{Epoch: 5, CreatedAt: t5}, MembersHeld: true}),
				&pb.SessionResponse{Msg: &pb.SessionResponse_EpochChange{EpochChange: &pb.RingEpochChange{
					Epoch: 6, BaseEpoch: 5, PreviousEpoch: 5, CreatedAt: t6, Upserted: []*pb.Member{m("c")}}}})
		case 3:
			// Epoch 6 of another history.
			return send(stream, snapshot(&pb.Snapshot{Epoch: &pb.RingEpoch{Epoch: 6, CreatedAt: t5}, MembersHeld: true}))
		case 4:
			return send(stream, snapshot(&pb.Snapshot{Epoch: &pb.RingEpoch{Epoch: 7, Members: []*pb.Member{m("d")}}}))
		}
		<-stream.Context().Done()
		return nil
	})
	log := runEpochLog(t, c, "node-1", nil)
	for _, want := range []string{"a@a:1,b@b:1", "a@a:1,b@b:1,c@c:1", "d@d:1"} {
		select {
		case e := <-log.epochs:
			if got := members(e); got != want {
				t.Fatalf("epoch %d applied with %s, want %s", e.GetEpoch(), got, want)
			}
		case <-time.After(time.Minute):
			t.Fatalf("no epoch with %s applied within a minute", want)
		}
	}
	for i, want := range []struct {
		epoch uint64
		at    *timestamppb.Timestamp
	}{{0, nil}, {5, t5}, {6, t6}, {6, nil}} {
		h := <-c.hellos
		if h.GetLastEpoch() != want.epoch || !proto.Equal(h.GetLastEpochCreatedAt(), want.at) {
			t.Fatalf("hello %d named epoch %d created %v, want %d created %v", i+1, h.GetLastEpoch(), h.GetLastEpochCreatedAt(), want.epoch, want.at)
		}
	}
}
