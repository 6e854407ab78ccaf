package controlplane

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/shardcache/shardcache/proto/shardcache/v1"
)

// A batch built from each purge's own encoding is the PurgeBatch a
// marshal of the purges makes.
func TestPurgeBatchesBuiltFromSharedEncodings(t *testing.T) {
	var ps []*pb.Purge
	var items [][]byte
	for i := range 5 {
		p := &pb.Purge{Id: fmt.Sprint("p", i), Kind: pb.PurgeKind_PURGE_KIND_TAG, Tag: fmt.Sprint("t", i), Revision: int64(i + 1), Soft: i%2 == 0}
		ps = append(ps, p)
		items = append(items, batchItem(p))
	}
	// A batch's buffer goes back to the pool once written; the next batch,
	// smaller, may be built in it and must hold nothing of the first.
	for _, n := range []int{5, 2} {
		msg := purgeBatchMessage(items[:n], batchBuffers)
		got := &pb.SessionResponse{}
		if err := proto.Unmarshal(msg.ReadOnlyData(), got); err != nil {
			t.Fatal(err)
		}
		msg.Free()
		want := &pb.SessionResponse{Msg: &pb.SessionResponse_Purges{Purges: &pb.PurgeBatch{Purges: ps[:n]}}}
		if !proto.Equal(got, want) {
			t.Fatalf("decoded %v, want %v", got, want)
		}
	}
}

// recvCompact reads one message of a compact session.
func recvCompact(t *testing.T, n *nodeSession) *pb.SessionResponse {
	t.Helper()
	resp, err := n.recvUntil(func(r *pb.SessionResponse) bool { return r.GetHeartbeat() == nil && r.GetPolicies() == nil })
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// A node that says compact_pushes gets its snapshot's members ahead of it,
// epochs as their change from the one it has, and purges in batches.
func TestCompactPushes(t *testing.T) {
	s, _, _ := startServer(t, nil)
	conn := dial(t, s)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	first := openSession(t, conn, "a")
	first.waitEpoch(t, "a")
	stream := sayHello(t, ctx, conn, &pb.Hello{Member: &pb.Member{Id: "b", PeerAddress: "127.0.0.1:9999"}, CompactPushes: true})
	n := &nodeSession{stream: stream, cancel: cancel}
	var members []*pb.Member
	var cur *pb.RingEpoch
	var membersOf []uint64 // the epoch each SnapshotMembers names
	for cur == nil {
		switch resp := recvCompact(t, n); {
		case resp.GetSnapshotMembers() != nil:
			members = append(members, resp.GetSnapshotMembers().GetMembers()...)
			membersOf = append(membersOf, resp.GetSnapshotMembers().GetEpoch())
		case resp.GetSnapshot() != nil:
			cur = resp.GetSnapshot().GetEpoch()
			cur.Members = append(members, cur.GetMembers()...)
			for _, e := range membersOf {
				if e != cur.GetEpoch() {
					t.Fatalf("members ahead of the snapshot of epoch %d name epoch %d", cur.GetEpoch(), e)
				}
			}
		default:
			t.Fatalf("before the snapshot: %v", resp)
		}
	}
	if len(cur.GetMembers()) != 1 || cur.GetMembers()[0].GetId() != "a" || !proto.Equal(cur, s.hub.epoch()) {
		t.Fatalf("the snapshot's epoch is %v, want the replica's %v", cur, s.hub.epoch())
	}
	// b joins: the next epoch comes as the change from the one b has.
	deadline := time.After(30 * time.Second)
	for {
		select {
		case <-deadline:
			t.Fatal("no epoch change within 30 s")
		default:
		}
		resp := recvCompact(t, n)
		if resp.GetEpoch() != nil {
			t.Fatalf("a whole epoch %d to a compact node that has epoch %d", resp.GetEpoch().GetEpoch(), cur.GetEpoch())
		}
		c := resp.GetEpochChange()
		if c == nil {
			continue
		}
		if c.GetBaseEpoch() != cur.GetEpoch() || len(c.GetUpserted()) != 1 || c.GetUpserted()[0].GetId() != "b" || len(c.GetRemoved()) != 0 {
			t.Fatalf("change %v from epoch %d: want b added", c, cur.GetEpoch())
		}
		break
	}
	admin := pb.NewAdminServiceClient(conn)
	actx := adminCtx(context.Background(), testToken)
	go func() {
		_, _ = admin.PurgeTag(actx, &pb.PurgeTagRequest{RequestId: "t1", Tag: "x", Soft: true})
	}()
	for {
		resp := recvCompact(t, n)
		if resp.GetPurge() != nil {
			t.Fatal("a purge alone to a compact node")
		}
		if b := resp.GetPurges(); b != nil {
			if p := b.GetPurges(); len(p) != 1 || p[0].GetId() != "t1" || !p[0].GetSoft() {
				t.Fatalf("batch %v, want the soft purge t1", b)
			}
			return
		}
	}
}

// A session woken with no purge to send (an epoch or a policy shares its
// wake-up) sends none and does not start a pace, which would hold back
// the next purge; with one to send, a push within the pace is put off to
// its end.
func TestAWakeWithNoPurgePacesNothing(t *testing.T) {
	hub := newPurgeHub()
	hub.load([]*pb.Purge{{Id: "p1", Kind: pb.PurgeKind_PURGE_KIND_URL, Url: "http://shop.example/a", Revision: 5}}, nil)
	r := &sessionRun{n: &nodeService{purges: hub}, sentPurges: 5, purgesMuted: new(atomic.Bool)}
	if err := r.pacePurges(); err != nil || !r.pushedAt.IsZero() || r.paced != nil {
		t.Fatalf("nothing to send: err %v, pushed at %v, paced %v", err, r.pushedAt, r.paced)
	}
	// A purge the node lacks, a push a moment ago: paced, not sent (the
	// session has no stream to send on).
	r.sentPurges, r.pushedAt = 4, time.Now()
	if err := r.pacePurges(); err != nil || r.paced == nil || !r.purgesMuted.Load() {
		t.Fatalf("a purge within the pace: err %v, paced %v, muted %v", err, r.paced, r.purgesMuted.Load())
	}
	r.paced.Stop()
}

// firstOfSnapshot reads a compact session up to its snapshot and returns
// it with how many SnapshotMembers messages came ahead of it.
func firstOfSnapshot(t *testing.T, n *nodeSession) (*pb.Snapshot, int) {
	t.Helper()
	parts := 0
	for {
		resp := recvCompact(t, n)
		switch {
		case resp.GetSnapshotMembers() != nil:
			parts++
		case resp.GetSnapshot() != nil:
			return resp.GetSnapshot(), parts
		default:
			t.Fatalf("before the snapshot: %v", resp)
		}
	}
}

// A node whose hello names the epoch the replica has, number and
// created_at, or the one before it, gets the snapshot without the members
// (after a replica's restart every node says hello at once); one whose
// epoch is another etcd history's of the same number gets them.
func TestASnapshotLeavesOutTheMembersTheNodeHolds(t *testing.T) {
	s, _, _ := startServer(t, nil)
	conn := dial(t, s)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	first := openSession(t, conn, "a")
	e1 := first.waitEpoch(t, "a")
	hello := func(id string, e uint64, at *timestamppb.Timestamp) *nodeSession {
		return &nodeSession{stream: sayHello(t, ctx, conn, &pb.Hello{Member: &pb.Member{Id: id, PeerAddress: "127.0.0.1:9999"},
			CompactPushes: true, LastEpoch: e, LastEpochCreatedAt: at}), cancel: cancel}
	}

	// b holds epoch 1: no members, and the snapshot names epoch 1 as held.
	b := hello("b", e1.GetEpoch(), e1.GetCreatedAt())
	snap, parts := firstOfSnapshot(t, b)
	if !snap.GetMembersHeld() || parts != 0 || len(snap.GetEpoch().GetMembers()) != 0 ||
		snap.GetEpoch().GetEpoch() != e1.GetEpoch() || !proto.Equal(snap.GetEpoch().GetCreatedAt(), e1.GetCreatedAt()) {
		t.Fatalf("snapshot to a node holding epoch %d: %v after %d member messages; want it held, without members", e1.GetEpoch(), snap, parts)
	}
	e2 := first.waitEpoch(t, "a", "b")

	// c holds epoch 1, the one before the current: the snapshot names it
	// held, and the change to epoch 2 comes next.
	c := hello("c", e1.GetEpoch(), e1.GetCreatedAt())
	snap, parts = firstOfSnapshot(t, c)
	if !snap.GetMembersHeld() || parts != 0 || snap.GetEpoch().GetEpoch() != e1.GetEpoch() {
		t.Fatalf("snapshot to a node holding the epoch before the current: %v after %d member messages; want epoch %d held", snap, parts, e1.GetEpoch())
	}
	var ch *pb.RingEpochChange
	for ch == nil {
		resp := recvCompact(t, c)
		if resp.GetEpoch() != nil {
			t.Fatalf("a whole epoch %d after a snapshot of a held epoch", resp.GetEpoch().GetEpoch())
		}
		ch = resp.GetEpochChange()
	}
	if ch.GetBaseEpoch() != e1.GetEpoch() || ch.GetEpoch() != e2.GetEpoch() || len(ch.GetUpserted()) != 1 || ch.GetUpserted()[0].GetId() != "b" {
		t.Fatalf("after the held snapshot: change %v, want epoch %d from %d with b added", ch, e2.GetEpoch(), e1.GetEpoch())
	}
	e3 := first.waitEpoch(t, "a", "b", "c")

	// d names epoch 3 with another created_at (another etcd's epoch 3):
	// the members come ahead of the snapshot.
	other := timestamppb.New(e3.GetCreatedAt().AsTime().Add(time.Second))
	d := hello("d", e3.GetEpoch(), other)
	snap, parts = firstOfSnapshot(t, d)
	if snap.GetMembersHeld() || parts == 0 {
		t.Fatalf("snapshot to a node naming epoch %d of another history: held %v after %d member messages; want the members", e3.GetEpoch(), snap.GetMembersHeld(), parts)
	}
	// So do they to a node naming no created_at (a node of an earlier
	// release), and to one whose epoch is older than the one before.
	for _, h := range []*nodeSession{hello("e", e3.GetEpoch(), nil), hello("f", e1.GetEpoch(), e1.GetCreatedAt())} {
		if snap, parts := firstOfSnapshot(t, h); snap.GetMembersHeld() || parts == 0 {
			t.Fatalf("held %v after %d member messages; want the members", snap.GetMembersHeld(), parts)
		}
	}
}
