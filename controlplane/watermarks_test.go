package controlplane

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/durationpb"

	pb "github.com/shardcache/shardcache/proto/shardcache/v1"
)

// ackingNode is a test node that says compact_pushes and acknowledges
// every purge it is pushed at once, with its applied revision, as nodes do.
type ackingNode struct {
	stream pb.NodeService_SessionClient
	cancel context.CancelFunc
	done   chan struct{}
	mu     sync.Mutex
	rev    int64
	// ack, when false, applies purges without acknowledging them.
	ack bool
}

func startAckingNode(t *testing.T, conn *grpc.ClientConn, id string, rev int64, ack bool) *ackingNode {
	t.Helper()
	return startAckingNodeAfter(t, conn, id, rev, ack, 0)
}

// startAckingNodeAfter is startAckingNode for a node that acknowledges
// each push delay after it came.
func startAckingNodeAfter(t *testing.T, conn *grpc.ClientConn, id string, rev int64, ack bool, delay time.Duration) *ackingNode {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	stream := sayHello(t, ctx, conn, &pb.Hello{Member: &pb.Member{Id: id, PeerAddress: "127.0.0.1:9999"}, PurgeRevision: rev, CompactPushes: true})
	n := &ackingNode{stream: stream, cancel: cancel, done: make(chan struct{}), rev: rev, ack: ack}
	snapshot := make(chan error, 1)
	go func() {
		defer close(n.done)
		established := false
		for {
			resp, err := stream.Recv()
			if err != nil {
				if !established {
					snapshot <- err
				}
				return
			}
			var ps []*pb.Purge
			switch {
			case resp.GetSnapshot() != nil:
				ps = resp.GetSnapshot().GetPurges()
				established = true
				snapshot <- nil
			case resp.GetPurges() != nil:
				ps = resp.GetPurges().GetPurges()
			case resp.GetPurge() != nil:
				t.Errorf("%s says compact_pushes but got a purge alone", id)
			}
			if len(ps) == 0 {
				continue
			}
			n.mu.Lock()
			n.rev = max(n.rev, ps[len(ps)-1].GetRevision())
			r := n.rev
			n.mu.Unlock()
			if !ack {
				continue
			}
			if delay > 0 && !sleepCtx(ctx, delay) {
				return
			}
			if err := stream.Send(&pb.SessionRequest{Msg: &pb.SessionRequest_PurgeResult{PurgeResult: &pb.PurgeResult{RevisionApplied: r}}}); err != nil {
				return
			}
		}
	}()
	t.Cleanup(func() { n.stop() })
	select {
	case err := <-snapshot:
		if err != nil {
			t.Fatalf("%s: no snapshot: %v", id, err)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("%s: no snapshot within 30 s", id)
	}
	return n
}

func (n *ackingNode) applied() int64 {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.rev
}

// stop breaks the node's stream, as a crash does (no goodbye).
func (n *ackingNode) stop() {
	n.cancel()
	<-n.done
}

// etcdRevision is etcd's revision now: one more for every write transaction.
func etcdRevision(t *testing.T, s *Server) int64 {
	t.Helper()
	resp, err := s.etcd.Get(context.Background(), "probe")
	if err != nil {
		t.Fatal(err)
	}
	return resp.Header.Revision
}

// ackingReplica starts a replica with batch interval and n nodes that
// acknowledge at once, and returns it, its connection and an admin client
// with its context.
func ackingReplica(t *testing.T, interval time.Duration, n int) (*Server, *grpc.ClientConn, pb.AdminServiceClient, context.Context) {
	t.Helper()
	s, _, _ := startServer(t, nil, func(c *Config) { c.PurgeAckInterval = interval })
	conn := dial(t, s)
	for i := range n {
		startAckingNode(t, conn, fmt.Sprintf("n%d", i), 0, true)
	}
	return s, conn, pb.NewAdminServiceClient(conn), adminCtx(context.Background(), testToken)
}

// The etcd write transactions a purge costs stay bounded as the rate of
// purges grows: one for the record, and the watermark records of the
// batches, one per replica per PurgeAckInterval at most, whatever the
// number of purges and nodes.
func TestEtcdWritesPerPurgeStayBoundedAsPurgesPerSecondGrow(t *testing.T) {
	const interval = 100 * time.Millisecond
	s, _, admin, ctx := ackingReplica(t, interval, 8)
	// Let the registrations' epoch be written first: it is no purge's.
	waitFor(t, func() bool { e := s.hub.epoch(); return e != nil && len(e.GetMembers()) == 8 })
	waitFor(t, func() bool { return s.marks.writes.Load() > 0 && !s.marks.writesPending() })

	var perPurge []float64
	for _, concurrent := range []int{1, 10, 50} {
		const rounds = 3
		rev0, writes0, start := etcdRevision(t, s), s.marks.writes.Load(), time.Now()
		for round := range rounds {
			var wg sync.WaitGroup
			for i := range concurrent {
				wg.Go(func() {
					id := fmt.Sprintf("c%d-r%d-%d", concurrent, round, i)
					resp, err := admin.Purge(ctx, &pb.PurgeRequest{RequestId: id, Url: "http://example.com/" + id, Wait: durationpb.New(30 * time.Second)})
					if err != nil || !resp.GetStatus().GetComplete() {
						t.Errorf("purge %s: %v %v, want complete", id, resp.GetStatus(), err)
					}
				})
			}
			wg.Wait()
		}
		// The batch after the last acknowledgement may land after the answers.
		waitFor(t, func() bool { return !s.marks.writesPending() })
		elapsed := time.Since(start)
		purges := int64(concurrent * rounds)
		total := etcdRevision(t, s) - rev0
		marks := int64(s.marks.writes.Load() - writes0)
		if records := total - marks; records != purges {
			t.Errorf("%d purges at once: %d write transactions besides the watermarks, want one per purge (%d)", concurrent, records, purges)
		}
		// One watermark write per batch at most: per interval, plus the last.
		if bound := int64(elapsed/interval) + 2; marks > bound {
			t.Errorf("%d purges at once: %d watermark writes in %s, more than one per %s batch (%d)", concurrent, marks, elapsed, interval, bound)
		}
		if marks > 2*int64(rounds) {
			t.Errorf("%d purges at once: %d watermark writes for %d rounds of purges, want at most two a round", concurrent, marks, rounds)
		}
		perPurge = append(perPurge, float64(total)/float64(purges))
	}
	if perPurge[2] >= perPurge[0] || perPurge[2] > 1.2 {
		t.Errorf("write transactions per purge at 1, 10 and 50 at once: %v; want them falling towards one", perPurge)
	}
}

// A node's acknowledgement answers for a purge only once its replica's
// watermark record holds it: a node that applied a purge but whose
// watermark was never written is reported pending, never complete. A
// replica cut off from etcd and killed before its batch loses nothing: the
// node says what it applied in the hello of its next session, on another
// replica, and the purge completes.
func TestAReplicaKilledMidBatchLosesNoAcknowledgement(t *testing.T) {
	etcd := testEtcd(t)
	proxy := startTCPProxy(t, etcd)
	// Replica a writes its batches 10 s after a change: not before it
	// loses etcd, in this test.
	a, _, stopA := startServer(t, []string{proxy.url()}, func(c *Config) { c.PurgeAckInterval = 10 * time.Second })
	b, _, _ := startServer(t, []string{etcd})
	admin := pb.NewAdminServiceClient(dial(t, b))
	ctx := adminCtx(context.Background(), testToken)

	n := startAckingNode(t, dial(t, a), "n1", 0, true)
	// slow applies purges but is slow to say so: a's batch waits for its
	// interval, since not every node of a has caught up.
	slow := startAckingNode(t, dial(t, a), "slow", 0, false)
	waitFor(t, func() bool { _, total := b.acks.count(1); return total == 2 })
	resp, err := admin.Purge(ctx, &pb.PurgeRequest{RequestId: "p1", Url: "http://example.com/a", Wait: durationpb.New(time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	st := resp.GetStatus()
	rev := st.GetPurge().GetRevision()
	waitFor(t, func() bool { return n.applied() >= rev && a.marks.revision("n1") >= rev })
	// Applied and acknowledged to a, which has not written it: pending.
	got, err := admin.GetPurge(ctx, &pb.GetPurgeRequest{RequestId: "p1", Wait: durationpb.New(500 * time.Millisecond)})
	if err != nil {
		t.Fatal(err)
	}
	if got.GetStatus().GetComplete() || !slices.Equal(got.GetStatus().GetPending(), []string{"n1", "slow"}) {
		t.Fatalf("status with the acknowledgement unwritten: %v, want n1 and slow pending", got.GetStatus())
	}

	// a loses etcd, then dies: its batch is never written. The node's
	// stream breaks and it connects to b, saying what it applied.
	proxy.cut()
	stopA()
	n.stop()
	slow.stop()
	if got, err := admin.GetPurge(ctx, &pb.GetPurgeRequest{RequestId: "p1"}); err != nil || got.GetStatus().GetComplete() {
		t.Fatalf("after a died: %v %v, want still pending", got.GetStatus(), err)
	}
	startAckingNode(t, dial(t, b), "n1", n.applied(), true)
	startAckingNode(t, dial(t, b), "slow", slow.applied(), true)
	got, err = admin.GetPurge(ctx, &pb.GetPurgeRequest{RequestId: "p1", Wait: durationpb.New(30 * time.Second)})
	if err != nil || !got.GetStatus().GetComplete() {
		t.Fatalf("after n1 returned through b: %v %v, want complete", got.GetStatus(), err)
	}
	if r := got.GetStatus().GetResults(); len(r) != 2 || r[0].GetNodeId() != "n1" || r[0].GetRevisionApplied() < rev || r[1].GetRevisionApplied() < rev {
		t.Fatalf("results %v, want n1 and slow at revision %d at least", r, rev)
	}
}

// A watermark record names at most maxBehind nodes, whatever the number of
// nodes; every other node is answered for by its one revision, at most the
// revision each of them applied.
func TestAWatermarkRecordIsBounded(t *testing.T) {
	w := newWatermarks(nil, "r", time.Second, time.Minute, nil)
	for i := range 1000 {
		w.open(fmt.Sprintf("n%04d", i), int64(i%300))
	}
	rec := w.recordLocked(time.Now())
	if len(rec.GetBehind()) > maxBehind {
		t.Fatalf("the record names %d nodes, more than %d", len(rec.GetBehind()), maxBehind)
	}
	named := map[string]int64{}
	for _, b := range rec.GetBehind() {
		named[b.GetNodeId()] = b.GetRevision()
		if b.GetRevision() >= rec.GetRevision() {
			t.Errorf("%s is named at %d, not behind the record's %d", b.GetNodeId(), b.GetRevision(), rec.GetRevision())
		}
	}
	for i := range 1000 {
		id, applied := fmt.Sprintf("n%04d", i), int64(i%300)
		credited, ok := named[id]
		if !ok {
			credited = rec.GetRevision()
		}
		if credited > applied {
			t.Fatalf("%s is credited with %d; it applied %d", id, credited, applied)
		}
	}
	// With few nodes, each is answered for exactly.
	small := newWatermarks(nil, "r", time.Second, time.Minute, nil)
	small.open("a", 5)
	small.open("b", 9)
	if rec := small.recordLocked(time.Now()); rec.GetRevision() != 9 || len(rec.GetBehind()) != 1 || rec.GetBehind()[0].GetRevision() != 5 {
		t.Fatalf("record of a at 5 and b at 9: %v", rec)
	}
}

// The batch learns when the last node with a session here has applied the
// newest purge: not before, not for a node whose session ended, and again
// for the next purge.
func TestTheLastNodeToApplyAPurgeIsNoticed(t *testing.T) {
	w := newWatermarks(nil, "r", time.Hour, time.Minute, nil)
	w.open("a", 3)
	w.open("b", 3)
	w.open("c", 3)
	steps := []struct {
		what   string
		do     func()
		caught bool
	}{
		{"purge 7, a applied it", func() { w.setHead(7); w.applied("a", 7) }, false},
		{"c gone (waited for by no batch), b at 6", func() { w.close("c"); w.applied("b", 6) }, false},
		{"b at 9", func() { w.applied("b", 9) }, true},
		{"purge 12, c back at 3, a and b applied it", func() { w.setHead(12); w.open("c", 3); w.applied("a", 12); w.applied("b", 12) }, false},
		{"c applied 12", func() { w.applied("c", 12) }, true},
	}
	for _, st := range steps {
		st.do()
		var caught bool
		select {
		case <-w.caught:
			caught = true
		default:
		}
		if caught != st.caught {
			t.Fatalf("%s: caught up %v, want %v", st.what, caught, st.caught)
		}
	}
}

// A purge that every node has applied is acknowledged without waiting out
// the batch interval: the watermark record is written once the last node
// applies it. The sessions' first batch would go 10 s after they opened;
// the purge completes well within that.
func TestAPurgeCompletesOnceTheLastNodeAppliesIt(t *testing.T) {
	s, _, admin, ctx := ackingReplica(t, 10*time.Second, 3)
	waitFor(t, func() bool { e := s.hub.epoch(); return e != nil && len(e.GetMembers()) == 3 })
	resp, err := admin.Purge(ctx, &pb.PurgeRequest{RequestId: "one", Url: "http://example.com/one", Wait: durationpb.New(5 * time.Second)})
	if err != nil || !resp.GetStatus().GetComplete() {
		t.Fatalf("purge: %v %v; want it complete before the 10 s batch", resp.GetStatus(), err)
	}
	waitFor(t, func() bool { return s.marks.writes.Load() > 0 && !s.marks.writesPending() })
	if n := s.marks.writes.Load(); n != 1 {
		t.Errorf("%d watermark records written; want the one that completed the purge", n)
	}
}

// A lone purge costs its record and one watermark batch, though the last
// node applies it after the batch interval: while nodes converge on the
// newest purge the batch waits for the catch-up, which writes it.
func TestALonePurgeCostsItsRecordAndOneBatch(t *testing.T) {
	const interval = 100 * time.Millisecond
	s, conn, admin, ctx := ackingReplica(t, interval, 3)
	startAckingNodeAfter(t, conn, "late", 0, true, 2*interval)
	waitFor(t, func() bool { e := s.hub.epoch(); return e != nil && len(e.GetMembers()) == 4 })
	waitFor(t, func() bool { return s.marks.writes.Load() > 0 && !s.marks.writesPending() })
	rev0, writes0 := etcdRevision(t, s), s.marks.writes.Load()
	resp, err := admin.Purge(ctx, &pb.PurgeRequest{RequestId: "lone", Url: "http://example.com/lone", Wait: durationpb.New(30 * time.Second)})
	if err != nil || !resp.GetStatus().GetComplete() {
		t.Fatalf("purge: %v %v, want complete", resp.GetStatus(), err)
	}
	waitFor(t, func() bool { return !s.marks.writesPending() })
	if marks, total := s.marks.writes.Load()-writes0, etcdRevision(t, s)-rev0; marks != 1 || total != 2 {
		t.Errorf("a lone purge whose last node applied it %s after the others: %d write transactions, %d of them watermark batches; want the record and one batch", 2*interval, total, marks)
	}
}

// When the last node applies purges long after the batch's convergeWait
// (as with thousands of nodes, where the fan-out takes seconds), the batch
// learns how long a purge takes to reach every node and waits for that,
// so a purge again costs its record and one batch, not one batch every few
// intervals while the nodes converge. Yet that wait is bounded: the status
// of a purge that a node has not applied shows the others' progress within
// maxConvergeWait.
func TestBatchesWaitAsLongAsThePurgesTakeToReachEveryNode(t *testing.T) {
	const interval = 20 * time.Millisecond
	const late = 50 * interval // 1 s: more than twelve times convergeWait
	s, conn, admin, ctx := ackingReplica(t, interval, 3)
	startAckingNodeAfter(t, conn, "late", 0, true, late)
	waitFor(t, func() bool { e := s.hub.epoch(); return e != nil && len(e.GetMembers()) == 4 })
	waitFor(t, func() bool { return s.marks.writes.Load() > 0 && !s.marks.writesPending() })
	var marks []uint64
	for i := range 4 {
		writes0 := s.marks.writes.Load()
		id := fmt.Sprintf("slow-%d", i)
		resp, err := admin.Purge(ctx, &pb.PurgeRequest{RequestId: id, Url: "http://example.com/" + id, Wait: durationpb.New(30 * time.Second)})
		if err != nil || !resp.GetStatus().GetComplete() {
			t.Fatalf("purge %s: %v %v, want complete", id, resp.GetStatus(), err)
		}
		waitFor(t, func() bool { return !s.marks.writesPending() })
		marks = append(marks, s.marks.writes.Load()-writes0)
	}
	// The first purge teaches the batch: it waits convergeWait intervals,
	// so the three quick nodes' acknowledgements go in a batch of their
	// own before the late node's catch-up writes another.
	if marks[0] < 2 {
		t.Errorf("watermark batches of the first purge: %d, want the quick nodes' and the catch-up's", marks[0])
	}
	// The purges after it cost the catch-up's batch alone: three in all,
	// six if the wait were not learnt (one more is let pass, for a purge
	// slower than the one before by half its time).
	if later := marks[1] + marks[2] + marks[3]; later > 4 {
		t.Errorf("watermark batches of the purges after it: %v, want one each (the catch-up's)", marks[1:])
	}

	// The wait is bounded: with the lag learnt at an hour, a batch still
	// goes within maxConvergeWait.
	s.marks.mu.Lock()
	s.marks.lag = time.Hour
	s.marks.mu.Unlock()
	s.marks.setHead(1 << 62) // a purge no node has applied yet
	if d := s.marks.batchDelay(); d != maxConvergeWait {
		t.Errorf("batch delay with a lag of an hour: %s, want %s", d, maxConvergeWait)
	}
}

// The lag the batch learns rises at once with a slow purge and falls by an
// eighth at most with a quick one: one quick purge does not cut the wait
// short for the next slow one.
func TestTheLearntLagFallsSlowly(t *testing.T) {
	w := newWatermarks(nil, "r", 50*time.Millisecond, time.Minute, nil)
	w.open("a", 1)
	took := func(rev int64, d time.Duration) time.Duration {
		w.mu.Lock()
		defer w.mu.Unlock()
		w.heads = append(w.heads, headAt{rev, time.Now().Add(-d)})
		if !w.passedLocked(rev) {
			t.Fatalf("purge %d not passed", rev)
		}
		return w.lag
	}
	if lag := took(2, time.Second); lag < time.Second || lag > 1100*time.Millisecond {
		t.Fatalf("after a purge of 1 s: lag %s", lag)
	}
	if lag := took(3, 10*time.Millisecond); lag < 875*time.Millisecond || lag > 1000*time.Millisecond {
		t.Fatalf("after a purge of 10 ms: lag %s, want 7/8 of the last", lag)
	}
	if lag := took(4, 2*time.Second); lag < 2*time.Second {
		t.Fatalf("after a purge of 2 s: lag %s, want 2 s at once", lag)
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached within 30 s")
		}
		time.Sleep(10 * time.Millisecond) // polling state that signals nothing
	}
}

// A replica started again under the same name is another run: its records
// do not answer for the nodes whose sessions the previous run held, which
// stay pending until they return.
func TestARestartedReplicaDoesNotAnswerForTheNodesOfItsLastRun(t *testing.T) {
	etcd := []string{testEtcd(t)}
	named := func(c *Config) { c.ReplicaID, c.LeaseTTL = "replica-r", 10*time.Second }
	first, _, stopFirst := startServer(t, etcd, named)
	gone := startAckingNode(t, dial(t, first), "gone", 0, false)
	waitFor(t, func() bool { return first.marks.writes.Load() > 0 && !first.marks.writesPending() })
	gone.stop()
	stopFirst() // the node's status record lives on until its lease expires
	second, _, _ := startServer(t, etcd, named)
	conn := dial(t, second)
	startAckingNode(t, conn, "back", 0, true)
	admin := pb.NewAdminServiceClient(conn)
	resp, err := admin.Purge(adminCtx(context.Background(), testToken), &pb.PurgeRequest{Url: "http://example.com/a", Wait: durationpb.New(2 * time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	if st := resp.GetStatus(); st.GetComplete() || !slices.Contains(st.GetPending(), "gone") || slices.Contains(st.GetPending(), "back") {
		t.Fatalf("status %v: want the node of the last run pending, the returned one not", st)
	}
}

// A purge's status at 1,000 nodes lists at most maxListed of each kind and
// counts the rest; exceptions are listed before plain acknowledgements, an
// error first; the nodes it lists are sorted.
func TestAPurgeStatusIsBounded(t *testing.T) {
	v := newAckView(time.Hour)
	const nodes, rev = 1000, 100
	results := map[string]*pb.PurgeResult{}
	for i := range nodes {
		id := fmt.Sprintf("n%04d", i)
		applied := int64(rev)
		if i%2 == 1 {
			applied = rev - 1 // every other node has not applied it
		}
		v.status[id] = viewStatus{replica: "r", run: "x", purgeRev: applied}
		if i >= 900 && i%2 == 0 {
			results[id] = &pb.PurgeResult{NodeId: id, PurgeId: "p", ObjectsRemoved: 1, RevisionApplied: rev}
		}
	}
	results["n0998"].Error = "disk tier: read-only file system"
	st := v.purgeStatus(&pb.Purge{Id: "p", Revision: rev}, results, true)
	if st.GetAcknowledged() != 500 || len(st.GetResults()) != maxListed || st.GetResultsOmitted() != 500-maxListed {
		t.Fatalf("%d acknowledged, %d listed, %d omitted; want 500, %d, %d", st.GetAcknowledged(), len(st.GetResults()), st.GetResultsOmitted(), maxListed, 500-maxListed)
	}
	if len(st.GetPending()) != maxListed || st.GetPendingOmitted() != 500-maxListed || st.GetComplete() {
		t.Fatalf("%d pending listed, %d omitted, complete %v; want %d, %d, false", len(st.GetPending()), st.GetPendingOmitted(), st.GetComplete(), maxListed, 500-maxListed)
	}
	if !slices.IsSortedFunc(st.GetResults(), func(x, y *pb.PurgeResult) int { return strings.Compare(x.GetNodeId(), y.GetNodeId()) }) || !slices.IsSorted(st.GetPending()) {
		t.Fatal("the listed nodes are not sorted")
	}
	if st.GetPending()[0] != "n0001" {
		t.Fatalf("first pending %s, want n0001: the first by node id", st.GetPending()[0])
	}
	excepted := 0
	for _, r := range st.GetResults() {
		if results[r.GetNodeId()] != nil {
			excepted++
		}
	}
	if excepted != 50 {
		t.Fatalf("%d of the 50 exceptions listed, want all (they come before plain acknowledgements)", excepted)
	}
	// A caller that asks for exceptions only gets those, in node order,
	// and the plain acknowledgements counted.
	brief := v.purgeStatus(&pb.Purge{Id: "p", Revision: rev}, results, false)
	if len(brief.GetResults()) != 50 || brief.GetAcknowledged() != 500 || brief.GetResultsOmitted() != 450 {
		t.Fatalf("exceptions only: %d listed, %d acknowledged, %d omitted; want 50, 500, 450", len(brief.GetResults()), brief.GetAcknowledged(), brief.GetResultsOmitted())
	}
	for _, r := range brief.GetResults() {
		if results[r.GetNodeId()] == nil {
			t.Fatalf("exceptions only: %s listed with a plain acknowledgement", r.GetNodeId())
		}
	}
	if !slices.IsSortedFunc(brief.GetResults(), func(x, y *pb.PurgeResult) int { return strings.Compare(x.GetNodeId(), y.GetNodeId()) }) {
		t.Fatal("exceptions only: the results are not sorted")
	}
	// More exceptions than the bound: the error is still among them.
	for i := range nodes {
		id := fmt.Sprintf("n%04d", i)
		if results[id] == nil && i%2 == 0 {
			results[id] = &pb.PurgeResult{NodeId: id, PurgeId: "p", ObjectsRemoved: 2, RevisionApplied: rev}
		}
	}
	st = v.purgeStatus(&pb.Purge{Id: "p", Revision: rev}, results, true)
	if len(st.GetResults()) != maxListed || !slices.ContainsFunc(st.GetResults(), func(r *pb.PurgeResult) bool { return r.GetError() != "" }) {
		t.Fatalf("%d listed; the node's error listed: %v", len(st.GetResults()), slices.ContainsFunc(st.GetResults(), func(r *pb.PurgeResult) bool { return r.GetError() != "" }))
	}
}

// The view's one watch covers the purge records: a purge's own record
// shows the view current to its revision, with no progress notice asked
// for (etcd defers those while any watcher of the stream is behind, which
// held purge calls for seconds under sustained purges).
func TestAPurgeRecordBringsTheViewToItsRevision(t *testing.T) {
	s, _, _ := startServer(t, nil)
	<-s.acks.ready
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for i := range 3 {
		p, err := s.state.recordPurge(ctx, &pb.Purge{Id: fmt.Sprintf("view-%d", i), Kind: pb.PurgeKind_PURGE_KIND_TAG, Tag: "t"})
		if err != nil {
			t.Fatal(err)
		}
		waitFor(t, func() bool { return s.acks.current(p.GetRevision()) })
	}
	if at := s.acks.progressAt.Load(); at != 0 {
		t.Fatalf("a progress notice was asked for at %d; the records alone should have moved the view", at)
	}
}

// A purge's status reads each node's credit as computed once for every
// purge; a node that leaves and one that joins in its place (the same
// number of nodes) make it computed again, so no node is judged by
// another's revision.
func TestAPurgeStatusFollowsTheNodesItJudges(t *testing.T) {
	v := newAckView(time.Hour)
	const rev = 100
	v.status["a"] = viewStatus{replica: "r", run: "x", purgeRev: rev}
	v.status["b"] = viewStatus{replica: "r", run: "x", purgeRev: rev}
	p := &pb.Purge{Id: "p", Revision: rev}
	if st := v.purgeStatus(p, nil, true); !st.GetComplete() || st.GetAcknowledged() != 2 {
		t.Fatalf("status %v: want both acknowledged", st)
	}
	// b leaves and c, which has applied nothing, joins, as the view's
	// watch records them.
	v.mu.Lock()
	delete(v.status, "b")
	v.status["c"] = viewStatus{replica: "r", run: "x", purgeRev: 0}
	v.ids = nil
	v.mu.Unlock()
	st := v.purgeStatus(p, nil, true)
	if st.GetComplete() || !slices.Equal(st.GetPending(), []string{"c"}) || st.GetAcknowledged() != 1 {
		t.Fatalf("status %v: want a acknowledged and c pending", st)
	}
	if acked, total := v.count(rev); acked != 1 || total != 2 {
		t.Fatalf("count %d of %d, want 1 of 2", acked, total)
	}
	if got := st.GetResults(); len(got) != 1 || got[0].GetNodeId() != "a" || got[0].GetRevisionApplied() != rev {
		t.Fatalf("results %v: want a's plain acknowledgement", got)
	}
}
