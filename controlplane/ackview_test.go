package controlplane

import (
	"context"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/shardcache/shardcache/proto/shardcache/v1"
)

// rewrite changes the node record at key with change and waits until the
// view has seen it; it returns whether the view then still held the
// credits it had computed before.
func rewrite(t *testing.T, s *Server, key string, change func(*pb.Node)) (kept bool) {
	t.Helper()
	ctx := context.Background()
	s.acks.count(1) // the credits computed
	resp, err := s.state.kv.Get(ctx, key)
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("reading %s: %v", key, err)
	}
	n := &pb.Node{}
	if err := proto.Unmarshal(resp.Kvs[0].Value, n); err != nil {
		t.Fatal(err)
	}
	change(n)
	b, _ := proto.Marshal(n)
	put, err := s.state.kv.Put(ctx, key, string(b), clientv3.WithIgnoreLease())
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	s.acks.catchUp(wctx, s.state.kv, put.Header.Revision)
	if wctx.Err() != nil {
		t.Fatal("the view did not see the rewrite")
	}
	s.acks.mu.Lock()
	defer s.acks.mu.Unlock()
	return s.acks.sorted != nil
}

// A node's status and last-heard records rewritten for its load alone
// leave every node's credit as computed (at 10,000 nodes such rewrites
// come 170 a second, and each made a waiting purge compute 10,000 credits
// again); a rewrite that changes what the node applied does not.
func TestALoadReportLeavesTheCreditsAsComputed(t *testing.T) {
	s, _, _ := startServer(t, nil)
	openSession(t, dial(t, s), "n1")
	waitFor(t, func() bool { _, total := s.acks.count(1); return total == 1 })

	// Another change (the replica's watermark batch) between the count
	// and the rewrite makes them stale too: a load-only rewrite must keep
	// them in one of a few tries.
	later := func(n *pb.Node) { n.LastReportAt = timestamppb.New(n.GetLastReportAt().AsTime().Add(time.Minute)) }
	keptOnce := func(key string) bool {
		for range 3 {
			if rewrite(t, s, key, later) {
				return true
			}
		}
		return false
	}
	if !keptOnce(s.state.statusKey("n1")) {
		t.Error("a status rewrite for the load alone made the credits stale")
	}
	if !keptOnce(s.state.seenKey("n1")) {
		t.Error("a last-heard rewrite for the load alone made the credits stale")
	}
	applied := func(n *pb.Node) { n.PurgeRevision += 1000 }
	if rewrite(t, s, s.state.seenKey("n1"), applied) {
		t.Error("a last-heard rewrite with a new applied revision kept the credits")
	}
	if rewrite(t, s, s.state.statusKey("n1"), applied) {
		t.Error("a status rewrite with a new applied revision kept the credits")
	}
	if acked, total := s.acks.count(1000); acked != 1 || total != 1 {
		t.Errorf("after the node applied past 1000: %d of %d acknowledged, want 1 of 1", acked, total)
	}
}
