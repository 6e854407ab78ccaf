package controlplane

import (
	"context"
	"strings"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/shardcache/shardcache/proto/shardcache/v1"
)

// recordLeases reads the leases id's session, member and status records
// are bound to, 0 for a record that is not there.
func recordLeases(t *testing.T, s *Server, id string) [3]clientv3.LeaseID {
	t.Helper()
	var out [3]clientv3.LeaseID
	for i, key := range []string{s.state.sessionKey(id), s.state.memberKey(id), s.state.statusKey(id)} {
		resp, err := s.state.kv.Get(context.Background(), key)
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.Kvs) > 0 {
			out[i] = clientv3.LeaseID(resp.Kvs[0].Lease)
		}
	}
	return out
}

func leaseCount(t *testing.T, s *Server) int {
	t.Helper()
	resp, err := s.state.kv.Leases(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return len(resp.Leases)
}

// registrar grants a lease and returns it with a function that registers
// node-1's session (process "proc") bound to it and returns the revision.
func registrar(t *testing.T, s *Server) (clientv3.LeaseID, func() int64) {
	t.Helper()
	lease, err := s.state.kv.Grant(context.Background(), 60)
	if err != nil {
		t.Fatal(err)
	}
	return lease.ID, func() int64 {
		t.Helper()
		rev, err := s.state.register(context.Background(), &pb.Node{Member: &pb.Member{Id: "node-1", PeerAddress: "127.0.0.1:9001"}}, "proc", lease.ID)
		if err != nil {
			t.Fatal(err)
		}
		return rev
	}
}

func TestSessionsShareTheReplicasLease(t *testing.T) {
	s, _, _ := startServer(t, nil)
	conn := dial(t, s)
	a := openSession(t, conn, "node-a")
	leases := leaseCount(t, s)
	b := openSession(t, conn, "node-b")
	openSession(t, conn, "node-c")
	a.waitEpoch(t, "node-a", "node-b", "node-c")

	// One lease for every session's records: more sessions, no more leases.
	if got := leaseCount(t, s); got != leases {
		t.Fatalf("%d leases with three sessions, %d with one: want one lease per replica, not per node", got, leases)
	}
	want := recordLeases(t, s, "node-a")[1]
	for _, id := range []string{"node-a", "node-b", "node-c"} {
		if got := recordLeases(t, s, id); got != [3]clientv3.LeaseID{want, want, want} || want == 0 {
			t.Fatalf("%s's session, member and status records are bound to %x, want all to the replica's lease %x", id, got, want)
		}
	}

	// A broken session's records go once the TTL has passed; the others'
	// stay bound to the lease.
	b.cancel()
	a.waitEpoch(t, "node-a", "node-c")
	if got := recordLeases(t, s, "node-b"); got != [3]clientv3.LeaseID{} {
		t.Fatalf("after node-b's session broke and the TTL passed its records are bound to %x, want none left", got)
	}
	if got := recordLeases(t, s, "node-c"); got != [3]clientv3.LeaseID{want, want, want} {
		t.Fatalf("node-c's records are bound to %x after node-b left, want %x", got, want)
	}
}

// A session's expiry removes its records only while no newer session of
// the id registered: a node that reconnected keeps its membership.
func TestAnExpiredSessionLeavesANewerRegistrationAlone(t *testing.T) {
	s, _, _ := startServer(t, nil)
	ctx := context.Background()
	lease, register := registrar(t, s)
	first := register()
	if err := s.state.release(ctx, "node-1", first, false, false, 0); err != nil {
		t.Fatal(err)
	}
	second := register()
	if err := s.state.expire(ctx, "node-1", first); err != nil {
		t.Fatal(err)
	}
	if got := recordLeases(t, s, "node-1"); got != [3]clientv3.LeaseID{lease, lease, lease} {
		t.Fatalf("the first session's expiry left records bound to %x, want the second session's three", got)
	}
	if err := s.state.expire(ctx, "node-1", second); err != nil {
		t.Fatal(err)
	}
	if got := recordLeases(t, s, "node-1"); got != [3]clientv3.LeaseID{} {
		t.Fatalf("the second session's expiry left records bound to %x, want none", got)
	}
}

// A replica whose lease is lost ends its sessions; their nodes register
// again under a new lease.
func TestALostReplicaLeaseEndsItsSessions(t *testing.T) {
	s, _, _ := startServer(t, nil)
	conn := dial(t, s)
	n, _ := openSessionWith(t, conn, helloFrom("node-1", "proc", "127.0.0.1:9001"))
	old := recordLeases(t, s, "node-1")[1]
	if _, err := s.state.kv.Revoke(context.Background(), old); err != nil {
		t.Fatal(err)
	}
	err := n.recvEnd(t)
	if code, end := sessionEndOf(t, err); code != codes.FailedPrecondition ||
		(end != pb.SessionEnd_SESSION_END_LEASE_LOST && end != pb.SessionEnd_SESSION_END_RECORD_DELETED) {
		t.Fatalf("after the replica's lease was revoked the session ended with %v (%s, %s), want FailedPrecondition, LEASE_LOST or RECORD_DELETED", err, code, end)
	}
	openSessionWith(t, conn, helloFrom("node-1", "proc", "127.0.0.1:9001"))
	if got := recordLeases(t, s, "node-1"); got[0] == old || got[0] == 0 || got != [3]clientv3.LeaseID{got[0], got[0], got[0]} {
		t.Fatalf("registered again, the records are bound to %x; want a new lease in place of the revoked %x", got, old)
	}
}

// A replica that stops ends every session it holds with Unavailable, so
// that its nodes reconnect to another, and leaves their records for the
// lease's TTL (the node is not dropped).
func TestAStoppingReplicaEndsItsSessions(t *testing.T) {
	s, _, stop := startServer(t, nil)
	conn := dial(t, s)
	a, _ := openSessionWith(t, conn, helloFrom("node-1", "proc", "127.0.0.1:9001"))
	b, _ := openSessionWith(t, conn, helloFrom("node-2", "proc", "127.0.0.1:9002"))
	go stop()
	for _, n := range []*nodeSession{a, b} {
		err := n.recvEnd(t)
		if st, _ := status.FromError(err); st.Code() != codes.Unavailable || !strings.Contains(st.Message(), "shutting down") {
			t.Fatalf("the replica stopping ended a session with %v, want Unavailable, shutting down", err)
		}
	}
}

// A session whose member record another writer overwrote takes its session
// key and status record with it, and leaves the foreign record alone.
func TestADroppedSessionLeavesAForeignMemberRecord(t *testing.T) {
	s, _, _ := startServer(t, nil)
	ctx := context.Background()
	_, register := registrar(t, s)
	rev := register()
	if _, err := s.state.kv.Put(ctx, s.state.memberKey("node-1"), "foreign"); err != nil {
		t.Fatal(err)
	}
	if err := s.state.release(ctx, "node-1", rev, true, false, 0); err != nil {
		t.Fatal(err)
	}
	if got := recordLeases(t, s, "node-1"); got != [3]clientv3.LeaseID{} {
		t.Fatalf("after the drop the records are bound to %x, want the session and status records gone and the foreign member record unleased", got)
	}
	if resp, err := s.state.kv.Get(ctx, s.state.memberKey("node-1")); err != nil || len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "foreign" {
		t.Fatalf("the foreign member record: %v, %v; want it left as written", resp, err)
	}
	if resp, err := s.state.kv.Get(ctx, s.state.statusKey("node-1")); err != nil || len(resp.Kvs) != 0 {
		t.Fatalf("the status record: %v, %v; want it gone", resp, err)
	}
}
