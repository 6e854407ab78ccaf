package controlplane

import (
	"context"
	"fmt"
	"io"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	pb "github.com/shardcache/shardcache/proto/shardcache/v1"
)

// etcdWatchers reads the embedded etcd's count of watchers in this process.
func etcdWatchers(t *testing.T) float64 {
	t.Helper()
	mfs, err := prometheus.DefaultGatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "etcd_debugging_mvcc_watcher_total" {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatal("the embedded etcd exports no etcd_debugging_mvcc_watcher_total")
	return 0
}

// Every session's member record is watched by the replica's one watch: a
// change reaches the session it is about, and only that one.
func TestSessionsShareOneMemberWatch(t *testing.T) {
	s, _, _ := startServer(t, nil)
	conn := dial(t, s)
	const n = 8
	open := func(from int) []*nodeSession {
		var ss []*nodeSession
		for i := from; i < from+n; i++ {
			sess, _ := openSessionWith(t, conn, helloFrom(fmt.Sprintf("node-%d", i), "proc", fmt.Sprintf("127.0.0.1:%d", 9000+i)))
			ss = append(ss, sess)
		}
		return ss
	}
	// The replica's own watches start with it (a leader's may start
	// meanwhile): n sessions more, with a watch each, would add n.
	sessions := open(0)
	before := etcdWatchers(t)
	sessions = append(sessions, open(n)...)
	if grown := etcdWatchers(t) - before; grown >= n {
		t.Fatalf("%d sessions more added %.0f etcd watchers, want fewer than one each", n, grown)
	}
	ctx := context.Background()
	b, _ := proto.Marshal(&pb.Member{Id: "node-2", PeerAddress: "127.0.0.1:1"})
	if _, err := s.state.kv.Put(ctx, s.state.memberKey("node-2"), string(b)); err != nil {
		t.Fatal(err)
	}
	if code, end := sessionEndOf(t, sessions[2].recvEnd(t)); code != codes.FailedPrecondition || end != pb.SessionEnd_SESSION_END_RECORD_REPLACED {
		t.Fatalf("node-2's session ended with %s, %s; want its record replaced", code, end)
	}
	if _, err := s.state.kv.Delete(ctx, s.state.memberKey("node-5")); err != nil {
		t.Fatal(err)
	}
	if code, end := sessionEndOf(t, sessions[5].recvEnd(t)); end != pb.SessionEnd_SESSION_END_RECORD_DELETED {
		t.Fatalf("node-5's session ended with %s, %s; want its record deleted", code, end)
	}
	// The others were told of neither: each still ends with its own goodbye.
	for i, sess := range sessions {
		if i == 2 || i == 5 {
			continue
		}
		if err := sess.stream.CloseSend(); err != nil {
			t.Fatal(err)
		}
		if err := sess.recvEnd(t); err != io.EOF {
			t.Fatalf("node-%d's session, closed by the node, ended with %v", i, err)
		}
	}
}

// A change made before a session subscribes (between its registration and
// the subscription), or while the watch was broken, still reaches it.
func TestAMemberChangeBeforeTheSubscriptionIsSeen(t *testing.T) {
	s, _, _ := startServer(t, nil)
	ctx := context.Background()
	kv := s.state.kv
	key := s.state.memberKey("node-9")
	put := func() int64 {
		t.Helper()
		resp, err := kv.Put(ctx, key, "x")
		if err != nil {
			t.Fatal(err)
		}
		return resp.Header.Revision
	}
	registered := put()
	other := put() // written by another, before the subscription
	ch, stop, err := s.members.subscribe(ctx, "node-9", registered)
	if err != nil {
		t.Fatal(err)
	}
	if first := <-ch; first.Type != clientv3.EventTypePut || first.Kv.ModRevision != other {
		t.Fatalf("the change at revision %d before the subscription came as %v", other, first)
	}
	stop()

	// A watch that is not running: only load (its start after a break)
	// can tell the subscription.
	w := newMemberWatch(s.state)
	ch, stop, err = w.subscribe(ctx, "node-9", put())
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	select {
	case ev := <-ch:
		t.Fatalf("the session's own registration was reported as a change: %v", ev)
	default:
	}
	if _, err := kv.Delete(ctx, key); err != nil {
		t.Fatal(err)
	}
	if _, err := w.load(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case ev := <-ch:
		if ev.Type != clientv3.EventTypeDelete {
			t.Fatalf("a deleted record was reported as %v", ev)
		}
	default:
		t.Fatal("load did not report the record deleted while the watch was away")
	}
}
