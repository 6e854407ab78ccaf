package controlplane

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/shardcache/shardcache/proto/shardcache/v1"
)

// recvPurge reads pushes until a purge arrives.
func (n *nodeSession) recvPurge(t *testing.T) *pb.Purge {
	t.Helper()
	resp, err := n.recvUntil(func(r *pb.SessionResponse) bool { return r.GetPurge() != nil })
	if err != nil {
		t.Errorf("waiting for a purge: %v", err)
	}
	return resp.GetPurge()
}

// ack sends the node's result of p.
func (n *nodeSession) ack(t *testing.T, p *pb.Purge, removed int64) {
	t.Helper()
	r := &pb.PurgeResult{PurgeId: p.GetId(), ObjectsRemoved: removed, RevisionApplied: p.GetRevision()}
	if err := n.stream.Send(&pb.SessionRequest{Msg: &pb.SessionRequest_PurgeResult{PurgeResult: r}}); err != nil {
		t.Error(err)
	}
}

func TestPurgeIsRecordedPushedAndAcknowledgedByEveryNode(t *testing.T) {
	s, _, _ := startServer(t, nil)
	conn := dial(t, s)
	admin := pb.NewAdminServiceClient(conn)
	ctx := adminCtx(context.Background(), testToken)
	n1 := openSession(t, conn, "n1")
	n2 := openSession(t, conn, "n2")

	// Each node applies the purge when it is pushed and acknowledges it.
	acked := make(chan *pb.Purge, 2)
	for i, n := range []*nodeSession{n1, n2} {
		go func() {
			p := n.recvPurge(t)
			n.ack(t, p, int64(i+1))
			acked <- p
		}()
	}
	resp, err := admin.Purge(ctx, &pb.PurgeRequest{RequestId: "req-1", Url: "http://Example.COM:80/a?b=1"})
	if err != nil {
		t.Fatal(err)
	}
	st := resp.GetStatus()
	if !st.GetComplete() || len(st.GetPending()) != 0 || len(st.GetResults()) != 2 {
		t.Fatalf("purge status %v: want complete with 2 results", st)
	}
	if got := st.GetPurge().GetUrl(); got != "http://example.com/a?b=1" {
		t.Errorf("recorded URL %q, want it normalised to http://example.com/a?b=1", got)
	}
	if r := st.GetResults(); r[0].GetNodeId() != "n1" || r[0].GetObjectsRemoved() != 1 || r[1].GetNodeId() != "n2" || r[1].GetObjectsRemoved() != 2 {
		t.Errorf("results %v: want n1 with 1 removed, n2 with 2", r)
	}
	p := <-acked
	<-acked
	if p.GetRevision() != st.GetPurge().GetRevision() || p.GetId() != "req-1" {
		t.Errorf("pushed %v, recorded %v", p, st.GetPurge())
	}

	// A retry with the same request id is the same purge: same revision,
	// nothing recorded twice.
	again, err := admin.Purge(ctx, &pb.PurgeRequest{RequestId: "req-1", Url: "http://example.com/a?b=1"})
	if err != nil {
		t.Fatal(err)
	}
	if again.GetStatus().GetPurge().GetRevision() != p.GetRevision() || !again.GetStatus().GetComplete() {
		t.Errorf("retry answered %v; want the first purge, complete", again.GetStatus())
	}
	_, err = admin.Purge(ctx, &pb.PurgeRequest{RequestId: "req-1", Url: "http://example.com/other"})
	if status.Code(err) != codes.AlreadyExists {
		t.Errorf("request id reused for another URL: %v, want AlreadyExists", err)
	}
	ps, _, _, err := s.state.purges(context.Background())
	if err != nil || len(ps) != 1 {
		t.Fatalf("recorded purges %v (%v), want exactly one", ps, err)
	}

	// A node that does not answer is reported pending when the wait ends;
	// reconnecting, it gets every purge after the revision it applied.
	n3 := openSession(t, conn, "n3")
	go func() {
		for _, n := range []*nodeSession{n1, n2} {
			n.ack(t, n.recvPurge(t), 0)
		}
	}()
	resp2, err := admin.PurgeTag(ctx, &pb.PurgeTagRequest{RequestId: "req-2", Tag: "product-7", Wait: durationpb.New(500 * time.Millisecond)})
	if err != nil {
		t.Fatal(err)
	}
	if st := resp2.GetStatus(); st.GetComplete() || !slices.Equal(st.GetPending(), []string{"n3"}) || len(st.GetResults()) != 2 {
		t.Fatalf("status %v: want n3 pending and two results", st)
	}
	n3.cancel()
	_, snap := openSessionWith(t, conn, &pb.Hello{Member: &pb.Member{Id: "n3", PeerAddress: "127.0.0.1:9999"}, PurgeRevision: p.GetRevision()})
	if got := snap.GetPurges(); len(got) != 1 || got[0].GetId() != "req-2" {
		t.Fatalf("snapshot after revision %d carries %v, want only req-2", p.GetRevision(), got)
	}
	_, snap = openSessionWith(t, conn, &pb.Hello{Member: &pb.Member{Id: "n4", PeerAddress: "127.0.0.1:9999"}})
	if got := snap.GetPurges(); len(got) != 2 || got[0].GetId() != "req-1" || got[1].GetId() != "req-2" {
		t.Fatalf("snapshot of a new node carries %v, want req-1 then req-2", got)
	}

	got, err := admin.GetPurge(ctx, &pb.GetPurgeRequest{RequestId: "req-2"})
	if err != nil || got.GetStatus().GetPurge().GetTag() != "product-7" {
		t.Fatalf("GetPurge: %v, %v", got, err)
	}
	// Asked for exceptions only, a status lists the nodes that removed
	// objects and counts the plain acknowledgements.
	brief, err := admin.GetPurge(ctx, &pb.GetPurgeRequest{RequestId: "req-1", ExceptionsOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	if st := brief.GetStatus(); len(st.GetResults()) != 2 || st.GetResults()[0].GetNodeId() != "n1" || st.GetResults()[1].GetNodeId() != "n2" ||
		st.GetResultsOmitted() != st.GetAcknowledged()-2 {
		t.Fatalf("req-1, exceptions only: %v; want n1 and n2 listed, the rest counted", st)
	}
	brief, err = admin.GetPurge(ctx, &pb.GetPurgeRequest{RequestId: "req-2", ExceptionsOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	if st := brief.GetStatus(); len(st.GetResults()) != 0 || st.GetAcknowledged() < 2 || st.GetResultsOmitted() != st.GetAcknowledged() {
		t.Fatalf("req-2, exceptions only: %v; want no result listed and every acknowledgement counted", st)
	}
	if _, err := admin.GetPurge(ctx, &pb.GetPurgeRequest{RequestId: "never"}); status.Code(err) != codes.NotFound {
		t.Errorf("GetPurge of an unknown id: %v, want NotFound", err)
	}
}

func TestBadPurgesAreRefusedAndNothingIsRecorded(t *testing.T) {
	s, _, _ := startServer(t, nil)
	conn := dial(t, s)
	admin := pb.NewAdminServiceClient(conn)
	ctx := adminCtx(context.Background(), testToken)
	bad := []struct {
		name string
		call func() error
	}{
		{"empty url", func() error { _, err := admin.Purge(ctx, &pb.PurgeRequest{}); return err }},
		{"relative url", func() error { _, err := admin.Purge(ctx, &pb.PurgeRequest{Url: "/a/b"}); return err }},
		{"ftp url", func() error { _, err := admin.Purge(ctx, &pb.PurgeRequest{Url: "ftp://h/a"}); return err }},
		{"url with control character", func() error { _, err := admin.Purge(ctx, &pb.PurgeRequest{Url: "http://h/a\x00"}); return err }},
		{"url and key", func() error { _, err := admin.Purge(ctx, &pb.PurgeRequest{Url: "http://h/a", Key: "k"}); return err }},
		{"bad request id", func() error {
			_, err := admin.Purge(ctx, &pb.PurgeRequest{RequestId: "a/b", Url: "http://h/a"})
			return err
		}},
		{"wait too long", func() error {
			_, err := admin.Purge(ctx, &pb.PurgeRequest{Url: "http://h/a", Wait: durationpb.New(time.Hour)})
			return err
		}},
		{"empty prefix", func() error { _, err := admin.PurgePrefix(ctx, &pb.PurgePrefixRequest{}); return err }},
		{"prefix without slash", func() error { _, err := admin.PurgePrefix(ctx, &pb.PurgePrefixRequest{PathPrefix: "img"}); return err }},
		{"slash without all", func() error { _, err := admin.PurgePrefix(ctx, &pb.PurgePrefixRequest{PathPrefix: "/"}); return err }},
		{"host with port", func() error {
			_, err := admin.PurgePrefix(ctx, &pb.PurgePrefixRequest{Host: "h:80", PathPrefix: "/a"})
			return err
		}},
		{"empty tag", func() error { _, err := admin.PurgeTag(ctx, &pb.PurgeTagRequest{}); return err }},
		{"two tags", func() error { _, err := admin.PurgeTag(ctx, &pb.PurgeTagRequest{Tag: "a b"}); return err }},
	}
	for _, b := range bad {
		if err := b.call(); status.Code(err) != codes.InvalidArgument {
			t.Errorf("%s: %v, want InvalidArgument", b.name, err)
		}
	}
	for name, c := range map[string]context.Context{"no token": context.Background(), "wrong token": adminCtx(context.Background(), "nope")} {
		if _, err := admin.Purge(c, &pb.PurgeRequest{Url: "http://h/a"}); status.Code(err) != codes.Unauthenticated {
			t.Errorf("%s: %v, want Unauthenticated", name, err)
		}
	}
	if ps, _, _, err := s.state.purges(context.Background()); err != nil || len(ps) != 0 {
		t.Fatalf("recorded %v (%v); refused purges must record nothing", ps, err)
	}
	// "/" is allowed with all; with no node registered it completes at once.
	resp, err := admin.PurgePrefix(ctx, &pb.PurgePrefixRequest{PathPrefix: "/", All: true})
	if err != nil || !resp.GetStatus().GetComplete() {
		t.Fatalf("purge of everything with all: %v, %v", resp, err)
	}
}

// purgeTags records n purges by tag through the admin API, with request
// ids prefix0, prefix1..., and returns them as recorded, waiting for no
// node's acknowledgement.
func purgeTags(t *testing.T, conn *grpc.ClientConn, prefix string, n int) []*pb.Purge {
	t.Helper()
	admin := pb.NewAdminServiceClient(conn)
	ctx := adminCtx(context.Background(), testToken)
	var out []*pb.Purge
	for i := range n {
		resp, err := admin.PurgeTag(ctx, &pb.PurgeTagRequest{RequestId: fmt.Sprint(prefix, i), Tag: fmt.Sprint("tag", i), Wait: durationpb.New(time.Millisecond)})
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, resp.GetStatus().GetPurge())
	}
	return out
}

func revisions(ps []*pb.Purge) []int64 {
	out := make([]int64, len(ps))
	for i, p := range ps {
		out[i] = p.GetRevision()
	}
	return out
}

func TestOldPurgesAreCompactedBehindAFloor(t *testing.T) {
	s, _, _ := startServer(t, nil, func(c *Config) {
		c.PurgeMaxRecords = 2
		c.PurgeCompactInterval = 50 * time.Millisecond
	})
	conn := dial(t, s)
	admin := pb.NewAdminServiceClient(conn)
	ctx := adminCtx(context.Background(), testToken)
	revs := revisions(purgeTags(t, conn, "t", 4))
	deadline := time.Now().Add(30 * time.Second)
	for {
		ps, floor, _, err := s.state.purges(context.Background())
		if err == nil && len(ps) == 2 && floor.GetRevision() == revs[1] {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("purges %v, floor %v: want the two newest kept and the floor at %d", ps, floor, revs[1])
		}
		time.Sleep(20 * time.Millisecond) // polling a condition
	}
	// The hub sees the floor through its watch; a node that applied
	// nothing first drops everything it has, then gets the kept purges.
	var snap *pb.Snapshot
	for deadline = time.Now().Add(30 * time.Second); ; {
		_, snap = openSessionWith(t, conn, &pb.Hello{Member: &pb.Member{Id: "late", PeerAddress: "127.0.0.1:9999"}})
		if len(snap.GetPurges()) == 3 || time.Now().After(deadline) {
			break
		}
	}
	got := snap.GetPurges()
	if len(got) != 3 || got[0].GetKind() != pb.PurgeKind_PURGE_KIND_PREFIX || got[0].GetPathPrefix() != "/" || got[0].GetHost() != "" ||
		got[0].GetRevision() != revs[1] || got[1].GetId() != "t2" || got[2].GetId() != "t3" {
		t.Fatalf("snapshot purges %v: want everything up to %d, then t2 and t3", got, revs[1])
	}
	// A node that applied the floor's revision gets only what follows.
	_, snap = openSessionWith(t, conn, &pb.Hello{Member: &pb.Member{Id: "recent", PeerAddress: "127.0.0.1:9999"}, PurgeRevision: revs[1]})
	if got := snap.GetPurges(); len(got) != 2 || got[0].GetId() != "t2" {
		t.Fatalf("snapshot after the floor: %v", got)
	}
	if _, err := admin.GetPurge(ctx, &pb.GetPurgeRequest{RequestId: "t0"}); status.Code(err) != codes.NotFound {
		t.Errorf("compacted purge: %v, want NotFound", err)
	}
}

// The leader's compaction takes the purges to delete from its replica's
// view. A view still behind an earlier compaction names purges already
// deleted: nothing is deleted again, the floor stays where it was, and
// the purges kept stay.
func TestACompactionFromAStaleViewDeletesNothing(t *testing.T) {
	s, _, _ := startServer(t, nil, func(c *Config) {
		c.PurgeMaxRecords = 2
		c.PurgeCompactInterval = 50 * time.Millisecond
	})
	all := purgeTags(t, dial(t, s), "s", 4)
	deadline := time.Now().Add(30 * time.Second)
	for {
		ps, floor, _, err := s.state.purges(context.Background())
		if err == nil && len(ps) == 2 && floor.GetRevision() == all[1].GetRevision() {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("purges %v, floor %v: want the two newest kept and the floor at %d", ps, floor, all[1].GetRevision())
		}
		time.Sleep(20 * time.Millisecond) // polling a condition
	}
	// A view that has seen the first three purges, not the fourth nor
	// that compaction, and no floor: by it s0 is to go, and a floor at
	// s0's revision would be lower than the one recorded.
	s.purgeHub.load(all[:3], nil)
	if got := s.purgeHub.expired(2, time.Time{}); len(got) != 1 || got[0].id != "s0" {
		t.Fatalf("a stale view's expired purges: %v, want s0", got)
	}
	always := clientv3.Compare(clientv3.CreateRevision(s.state.prefix+"no-such-key"), "=", 0)
	if err := s.compactPurgesOnce(context.Background(), always); err != nil {
		t.Fatalf("compacting from a stale view: %v", err)
	}
	ps, floor, _, err := s.state.purges(context.Background())
	if err != nil || len(ps) != 2 || ps[0].GetId() != "s2" || ps[1].GetId() != "s3" || floor.GetRevision() != all[1].GetRevision() {
		t.Fatalf("after a stale compaction: purges %v, floor %v, err %v; want s2 and s3 kept, the floor at %d", ps, floor, err, all[1].GetRevision())
	}
}

// A replica keeps whole only the newest purges (its window); a node that
// applied a purge older than those gets everything after it, in order,
// from a read of etcd, in its snapshot and in its pushes alike; a node
// within the window gets what follows from memory.
func TestANodeBehindThePurgeWindowGetsEveryPurgeItMissed(t *testing.T) {
	s, _, _ := startServer(t, nil, func(c *Config) { c.PurgeViewWindow = 3 })
	conn := dial(t, s)
	revs := revisions(purgeTags(t, conn, "w", 7))
	deadline := time.Now().Add(30 * time.Second)
	for s.purgeHub.head() < revs[6] {
		if time.Now().After(deadline) {
			t.Fatalf("the view's head %d, want %d", s.purgeHub.head(), revs[6])
		}
		time.Sleep(10 * time.Millisecond) // polling the replica's view: it signals no count
	}
	if all, whole := s.purgeHub.retained(); all != 7 || whole != 3 {
		t.Fatalf("%d purges retained, %d whole: want 7 and 3", all, whole)
	}
	ids := func(ps []*pb.Purge) (out []string) {
		for _, p := range ps {
			out = append(out, p.GetId())
		}
		return out
	}
	for _, c := range []struct {
		applied int64
		want    string
	}{{revs[0], "[w1 w2 w3 w4 w5 w6]"}, {revs[2], "[w3 w4 w5 w6]"}, {revs[3], "[w4 w5 w6]"}, {revs[5], "[w6]"}} {
		_, snap := openSessionWith(t, conn, &pb.Hello{Member: &pb.Member{Id: fmt.Sprint("node-", c.applied), PeerAddress: "127.0.0.1:9999"}, PurgeRevision: c.applied})
		if got := fmt.Sprint(ids(snap.GetPurges())); got != c.want {
			t.Errorf("a node that applied revision %d got %s, want %s", c.applied, got, c.want)
		}
		items, last, err := s.purgeHub.itemsSince(t.Context(), nil, c.applied, 1<<20)
		var pushed []*pb.Purge
		for _, it := range items {
			var b pb.PurgeBatch
			if err := proto.Unmarshal(it, &b); err != nil {
				t.Fatal(err)
			}
			pushed = append(pushed, b.GetPurges()...)
		}
		if got := fmt.Sprint(ids(pushed)); err != nil || got != c.want || last != revs[6] {
			t.Errorf("pushes after revision %d: %s up to %d (%v), want %s up to %d", c.applied, got, last, err, c.want, revs[6])
		}
	}
	// A read of etcd is reused for a second, but not for a node whose
	// revision is newer than the read: it lacks what came between that
	// revision and the window. x0 is newer than the last read and older
	// than the window (x2, x3, x4 whole).
	if _, _, err := s.purgeHub.since(t.Context(), revs[0]); err != nil {
		t.Fatal(err)
	}
	more := revisions(purgeTags(t, conn, "x", 5))
	for s.purgeHub.head() < more[4] {
		if time.Now().After(deadline) {
			t.Fatalf("the view's head %d, want %d", s.purgeHub.head(), more[4])
		}
		time.Sleep(10 * time.Millisecond) // polling the replica's view: it signals no count
	}
	ps, _, err := s.purgeHub.since(t.Context(), more[0])
	if got := fmt.Sprint(ids(ps)); err != nil || got != "[x1 x2 x3 x4]" {
		t.Errorf("a node at x0 after a read from before it: %s (%v), want [x1 x2 x3 x4]", got, err)
	}
}

// TestANodeJoinsWithMorePurgesThanOneMessageHolds: 150,000 retained
// purges are about 13 MiB encoded, three times gRPC's default 4 MiB
// receive limit (the node's). They reach a joining node whole and in
// order, ahead of its snapshot, no message over the limit.
func TestANodeJoinsWithMorePurgesThanOneMessageHolds(t *testing.T) {
	const n = 150000
	s, _, _ := startServer(t, nil, func(c *Config) { c.PurgeMaxRecords = 2 * n })
	ctx := context.Background()
	ops := make([]clientv3.Op, 0, 100)
	flush := func() {
		if _, err := s.state.kv.Txn(ctx).Then(ops...).Commit(); err != nil {
			t.Fatal(err)
		}
		ops = ops[:0]
	}
	for i := range n {
		p := &pb.Purge{Id: fmt.Sprintf("bulk-%06d", i), Kind: pb.PurgeKind_PURGE_KIND_URL,
			Url: fmt.Sprintf("http://www.example.com/catalogue/products/%06d?colour=blue", i), CreatedAt: timestamppb.Now()}
		b, err := proto.Marshal(p)
		if err != nil {
			t.Fatal(err)
		}
		ops = append(ops, clientv3.OpPut(s.state.purgeKey(p.GetId()), string(b)))
		if len(ops) == cap(ops) {
			flush()
		}
	}
	// The replica's view takes them from its watch; a session opened
	// before it has them all would be given fewer.
	deadline := time.Now().Add(time.Minute)
	for {
		all, _ := s.purgeHub.retained()
		if all == n {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the purge view holds %d of %d purges after a minute", all, n)
		}
		<-time.After(50 * time.Millisecond) // polling the replica's view: it signals no count
	}
	if size := proto.Size(&pb.Snapshot{Purges: mustSince(t, s)}); size < 3*4<<20/2 {
		t.Fatalf("the purges encode to %d bytes; the test needs more than the 4 MiB limit", size)
	}

	conn := dial(t, s) // the default receive limit: 4 MiB
	sess, snap := openSessionWith(t, conn, &pb.Hello{Member: &pb.Member{Id: "joiner", PeerAddress: "127.0.0.1:9999"}})
	got := snap.GetPurges()
	if len(got) != n {
		t.Fatalf("the joining node got %d purges, want %d", len(got), n)
	}
	for i, p := range got {
		// Written 100 to a transaction, they share revisions by the hundred.
		if want := fmt.Sprintf("bulk-%06d", i); p.GetId() != want || i > 0 && p.GetRevision() < got[i-1].GetRevision() {
			t.Fatalf("purge %d is %s at revision %d, want %s, not before revision %d", i, p.GetId(), p.GetRevision(), want, got[max(0, i-1)].GetRevision())
		}
	}
	if sess.missedBatches < 3 {
		t.Errorf("%d MissedPurges messages ahead of the snapshot; 13 MiB needs at least 3 of at most 1 MiB", sess.missedBatches)
	}
}

func mustSince(t *testing.T, s *Server) []*pb.Purge {
	ps, _, err := s.purgeHub.since(t.Context(), 0)
	if err != nil {
		t.Fatal(err)
	}
	return ps
}

func TestPurgeBatchesAreBoundedAndKeepOrder(t *testing.T) {
	var ps []*pb.Purge
	for i := range 1000 {
		ps = append(ps, &pb.Purge{Id: fmt.Sprintf("p%d", i), Url: strings.Repeat("u", i%300), Revision: int64(i + 1)})
	}
	for _, limit := range []int{1, 500, 4096, 1 << 20} {
		batches := purgeBatches(ps, limit)
		var all []*pb.Purge
		for _, b := range batches {
			size := 0
			for _, p := range b {
				size += proto.Size(p) + 6
			}
			if size > limit && len(b) > 1 {
				t.Errorf("limit %d: a batch of %d purges encodes to %d bytes", limit, len(b), size)
			}
			all = append(all, b...)
		}
		if !slices.Equal(all, ps) {
			t.Errorf("limit %d: the batches do not hold the purges in order", limit)
		}
	}
	if b := purgeBatches(nil, 1<<20); len(b) != 1 || len(b[0]) != 0 {
		t.Errorf("no purges: %d batches, want one empty (the snapshot's)", len(b))
	}
}

// A node cut off from the control plane (its session gone without a
// goodbye, its lease expired) is reported as unreachable, since when it was
// last heard from, and a purge is not complete without it; it completes
// when the node returns having applied it. A node that said goodbye is not
// waited for.
func TestAPurgeWaitsForACutOffNode(t *testing.T) {
	s, _, _ := startServer(t, nil)
	conn := dial(t, s)
	admin := pb.NewAdminServiceClient(conn)
	ctx := adminCtx(context.Background(), testToken)
	cut := openSession(t, conn, "cut")
	leaving := openSession(t, conn, "leaving")
	heard := time.Now()

	cut.cancel()                                       // the stream breaks: no goodbye
	if err := leaving.stream.CloseSend(); err != nil { // goodbye
		t.Fatal(err)
	}
	resp, err := admin.Purge(ctx, &pb.PurgeRequest{RequestId: "during-cut", Url: "http://example.com/a", Wait: durationpb.New(100 * time.Millisecond)})
	if err != nil {
		t.Fatal(err)
	}
	p := resp.GetStatus().GetPurge()
	var st *pb.PurgeStatus
	deadline := time.Now().Add(30 * time.Second)
	for {
		got, err := admin.GetPurge(ctx, &pb.GetPurgeRequest{RequestId: "during-cut"})
		if err != nil {
			t.Fatal(err)
		}
		st = got.GetStatus()
		if len(st.GetUnreachable()) > 0 && !slices.Contains(st.GetPending(), "leaving") {
			break // both leases gone
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 30 s: %v", st)
		}
		<-time.After(100 * time.Millisecond) // until the leases expire: etcd signals nothing here
	}
	if st.GetComplete() || !slices.Equal(st.GetPending(), []string{"cut"}) {
		t.Fatalf("status %v: want incomplete, pending only the cut-off node", st)
	}
	u := st.GetUnreachable()[0]
	if since := u.GetSince().AsTime(); u.GetNodeId() != "cut" || since.Before(heard.Add(-5*time.Second)) || since.After(time.Now()) {
		t.Fatalf("unreachable %v: want cut, last heard from about %s", u, heard.Format(time.RFC3339))
	}

	// Back, having applied the purge from its snapshot.
	back, snap := openSessionWith(t, conn, &pb.Hello{Member: &pb.Member{Id: "cut", PeerAddress: "127.0.0.1:9999"}})
	if got := snap.GetPurges(); len(got) == 0 || got[len(got)-1].GetId() != "during-cut" {
		t.Fatalf("the returning node's snapshot carries %v, want the purge it missed", got)
	}
	back.ack(t, p, 0)
	got, err := admin.GetPurge(ctx, &pb.GetPurgeRequest{RequestId: "during-cut", Wait: durationpb.New(10 * time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	if st := got.GetStatus(); !st.GetComplete() || len(st.GetUnreachable()) != 0 {
		t.Fatalf("after the node's return: %v, want complete", st)
	}
}

// A result that says no more than "applied" is answered by the node's
// status (one etcd write per node and purge, not two); a final result after
// a "sweeping" one replaces it.
func TestPlainAcknowledgementsAreNotStoredTwice(t *testing.T) {
	s, _, _ := startServer(t, nil)
	conn := dial(t, s)
	admin := pb.NewAdminServiceClient(conn)
	ctx := adminCtx(context.Background(), testToken)
	n1 := openSession(t, conn, "n1")
	done := make(chan struct{})
	go func() {
		defer close(done)
		p := n1.recvPurge(t)
		n1.ack(t, p, 0)
		p = n1.recvPurge(t)
		r := &pb.PurgeResult{PurgeId: p.GetId(), RevisionApplied: p.GetRevision(), Sweeping: true}
		if err := n1.stream.Send(&pb.SessionRequest{Msg: &pb.SessionRequest_PurgeResult{PurgeResult: r}}); err != nil {
			t.Error(err)
		}
		n1.ack(t, p, 0)
	}()
	for _, id := range []string{"plain", "swept"} {
		resp, err := admin.Purge(ctx, &pb.PurgeRequest{RequestId: id, Url: "http://example.com/" + id, Wait: durationpb.New(10 * time.Second)})
		if err != nil {
			t.Fatal(err)
		}
		if st := resp.GetStatus(); !st.GetComplete() || len(st.GetResults()) != 1 {
			t.Fatalf("%s: %v, want complete with n1's result", id, st)
		}
	}
	<-done
	acks, err := s.state.kv.Get(ctx, s.state.purgeAcksPrefix("plain"), clientv3.WithPrefix())
	if err != nil || len(acks.Kvs) != 0 {
		t.Fatalf("a plain acknowledgement stored %d records (%v), want none", len(acks.Kvs), err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		got, err := admin.GetPurge(ctx, &pb.GetPurgeRequest{RequestId: "swept"})
		if err != nil {
			t.Fatal(err)
		}
		if r := got.GetStatus().GetResults(); len(r) == 1 && !r[0].GetSweeping() {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the final result never replaced the sweeping one: %v", got.GetStatus())
		}
		<-time.After(20 * time.Millisecond) // the final result's write: nothing to wait on
	}
}
