package session

import (
	"context"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	pb "github.com/shardcache/shardcache/proto/shardcache/v1"
	"github.com/shardcache/shardcache/sdk/h2frames"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// control is a hand-written NodeService whose answer to each hello is
// chosen by the test: session gets the stream after the hello and decides
// how it goes on.
type control struct {
	pb.UnimplementedNodeServiceServer
	hellos  chan *pb.Hello
	session func(n int, stream pb.NodeService_SessionServer) error
	count   atomic.Int32
	addr    string
	conns   connList
}

// connList is a listener that keeps the connections it accepts, so that a
// test can cut them as a control plane's keepalive does.
type connList struct {
	net.Listener
	mu    sync.Mutex
	conns []net.Conn
	// counting: the frames of every connection accepted are counted,
	// into counts (window_test.go).
	counting bool
	counts   []*h2frames.Counts
}

func (l *connList) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.mu.Lock()
		if l.counting {
			var n *h2frames.Counts
			c, n = h2frames.Watch(c, true)
			l.counts = append(l.counts, n)
		}
		l.conns = append(l.conns, c)
		l.mu.Unlock()
	}
	return c, err
}

// cut closes every accepted connection.
func (l *connList) cut() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, c := range l.conns {
		c.Close()
	}
	l.conns = nil
}

func (c *control) Session(stream pb.NodeService_SessionServer) error {
	req, err := stream.Recv()
	if err != nil {
		return err
	}
	select {
	case c.hellos <- req.GetHello():
	default:
	}
	return c.session(int(c.count.Add(1)), stream)
}

func startControl(t *testing.T, session func(n int, stream pb.NodeService_SessionServer) error) *control {
	t.Helper()
	return startControlCounting(t, session, false)
}

// startControlCounting is startControl, the frames of every connection
// accepted counted (into conns.counts) when counting.
func startControlCounting(t *testing.T, session func(n int, stream pb.NodeService_SessionServer) error, counting bool) *control {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c := &control{hellos: make(chan *pb.Hello, 64), session: session}
	c.conns.Listener = l
	c.conns.counting = counting
	srv := grpc.NewServer()
	pb.RegisterNodeServiceServer(srv, c)
	go srv.Serve(&c.conns)
	t.Cleanup(srv.Stop)
	c.addr = l.Addr().String()
	return c
}

// applier takes what a session pushes and remembers nothing else.
type applier struct{ epochs atomic.Uint64 }

func (a *applier) ApplyEpoch(e *pb.RingEpoch)                               { a.epochs.Store(e.GetEpoch()) }
func (a *applier) ApplyPolicies(*pb.PolicySet) error                        { return nil }
func (a *applier) PolicyRevision() int64                                    { return 0 }
func (a *applier) ApplyPurges(ps []*pb.Purge, report func(*pb.PurgeResult)) {}
func (a *applier) CaughtUp()                                                {}
func (a *applier) PurgeRevision() int64                                     { return 0 }

// runClient runs a session client against c until the test ends.
func runClient(t *testing.T, c *control, opts ...func(*Config)) *Client {
	t.Helper()
	cfg := Config{Addresses: []string{c.addr}, Member: &pb.Member{Id: "node-1", PeerAddress: "127.0.0.1:9001"},
		MinBackoff: time.Millisecond, MaxBackoff: 5 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(testLog{t}, nil))}
	for _, o := range opts {
		o(&cfg)
	}
	return runClientWith(t, c, &applier{}, cfg)
}

// runClientWith runs a session client over a with cfg until the test ends.
func runClientWith(t *testing.T, c *control, a Applier, cfg Config) *Client {
	t.Helper()
	cl, err := New(cfg, a)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		cl.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	return cl
}

func snapshot(epoch uint64, heartbeat time.Duration) *pb.SessionResponse {
	snap := &pb.Snapshot{Epoch: &pb.RingEpoch{Epoch: epoch}}
	if heartbeat > 0 {
		snap.HeartbeatInterval = durationpb.New(heartbeat)
	}
	return &pb.SessionResponse{Msg: &pb.SessionResponse_Snapshot{Snapshot: snap}}
}

// waitHellos waits for n hellos, failing after a minute.
func (c *control) waitHellos(t *testing.T, n int) []*pb.Hello {
	t.Helper()
	var got []*pb.Hello
	timeout := time.After(time.Minute)
	for len(got) < n {
		select {
		case h := <-c.hellos:
			got = append(got, h)
		case <-timeout:
			t.Fatalf("%d hellos, want %d: the client stopped reconnecting", len(got), n)
		}
	}
	return got
}

// A stream that ends while the client is sending on it (as after the node
// was paused: the control plane's keepalive closed the connection, and the
// first thing the node does on waking is ask for the epoch its peers name)
// must end the session and reconnect. The client once read the status of
// such a stream from a second goroutine while its reader held it, and
// waited for ever.
func TestASendOnAnEndedStreamReconnects(t *testing.T) {
	var c *control
	c = startControl(t, func(n int, stream pb.NodeService_SessionServer) error {
		if err := stream.Send(snapshot(1, 0)); err != nil {
			return err
		}
		if n%2 == 0 {
			c.conns.cut() // the connection goes, as a keepalive ends it
			return nil
		}
		return status.Error(codes.Unavailable, "control plane ends the stream")
	})
	cl := runClient(t, c)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			cl.RequestEpoch(100) // a peer names epoch 100
			time.Sleep(100 * time.Microsecond)
		}
	})
	hellos := c.waitHellos(t, 50)
	close(stop)
	wg.Wait()
	if hellos[0].GetInstance() == "" || hellos[49].GetInstance() != hellos[0].GetInstance() {
		t.Fatalf("instances %q and %q: one process says hello with one instance", hellos[0].GetInstance(), hellos[49].GetInstance())
	}
}

// A stream that goes silent past three heartbeat intervals is taken for
// dead and replaced, even though the connection under it looks healthy.
func TestASilentStreamIsReplaced(t *testing.T) {
	var firstEnded atomic.Bool
	c := startControl(t, func(n int, stream pb.NodeService_SessionServer) error {
		if err := stream.Send(snapshot(1, 20*time.Millisecond)); err != nil {
			return err
		}
		<-stream.Context().Done() // silent: no heartbeat, no push
		if n == 1 {
			firstEnded.Store(true)
		}
		return nil
	})
	runClient(t, c)
	c.waitHellos(t, 2)
	// Only the client ends the first stream.
	waitFor(t, firstEnded.Load)
}

func endWith(code codes.Code, end pb.SessionEnd, msg string) error {
	st, _ := status.New(code, msg).WithDetails(&errdetails.ErrorInfo{Reason: end.String(), Domain: pb.SessionEndDomain})
	return st.Err()
}

func TestMembershipFollowsWhatTheControlPlaneSays(t *testing.T) {
	refusals := 3
	admitted := make(chan struct{})
	var events struct {
		sync.Mutex
		causes []string
	}
	c := startControl(t, func(n int, stream pb.NodeService_SessionServer) error {
		switch {
		case n < refusals:
			return endWith(codes.AlreadyExists, pb.SessionEnd_SESSION_END_DUPLICATE_ID, "node id node-1 has an open session (peer 127.0.0.1:7)")
		case n == refusals:
			return endWith(codes.ResourceExhausted, pb.SessionEnd_SESSION_END_RING_FULL, "the ring has its maximum of 2 members (--max-members); node-1 is not one of them")
		case n == refusals+1:
			if err := stream.Send(snapshot(1, 0)); err != nil {
				return err
			}
			<-admitted
			return endWith(codes.FailedPrecondition, pb.SessionEnd_SESSION_END_RECORD_DELETED, "the member record of node-1 was deleted")
		default:
			if err := stream.Send(snapshot(1, 0)); err != nil {
				return err
			}
			<-stream.Context().Done()
			return nil
		}
	})
	cl := runClient(t, c, func(cfg *Config) {
		cfg.OnMembership = func(member bool, cause, _ string) {
			events.Lock()
			defer events.Unlock()
			if member {
				cause = "member"
			}
			events.causes = append(events.causes, cause)
		}
	})
	if ok, why := cl.Member(); ok || why == "" {
		t.Fatalf("before any snapshot: member %t (%q)", ok, why)
	}
	c.waitHellos(t, refusals+1)
	waitFor(t, func() bool { ok, _ := cl.Member(); return ok })
	close(admitted)
	c.waitHellos(t, 1)
	waitFor(t, func() bool { ok, _ := cl.Member(); return ok && cl.Connected() })
	events.Lock()
	got := strings.Join(events.causes, ",")
	events.Unlock()
	want := "duplicate_id,duplicate_id,ring_full,member,record_deleted,member"
	if got != want {
		t.Fatalf("membership events %s, want %s", got, want)
	}
}

// waitFor polls cond for up to a minute.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached within a minute")
		}
		time.Sleep(time.Millisecond)
	}
}

// testLog sends a client's log to the test's.
type testLog struct{ t *testing.T }

func (l testLog) Write(b []byte) (int, error) {
	l.t.Log(strings.TrimSpace(string(b)))
	return len(b), nil
}

// recorder is an Applier that notes the purges applied and when the node
// was caught up, and reports each purge's result at once (p-err fails).
type recorder struct {
	applier
	mu     sync.Mutex
	events []string
}

func (r *recorder) ApplyPurges(ps []*pb.Purge, report func(*pb.PurgeResult)) {
	r.mu.Lock()
	for _, p := range ps {
		r.events = append(r.events, p.GetId())
	}
	r.mu.Unlock()
	for _, p := range ps {
		res := &pb.PurgeResult{PurgeId: p.GetId(), RevisionApplied: p.GetRevision()}
		if p.GetId() == "p-err" {
			res.Error = "cannot read it"
		}
		report(res)
	}
}

func (r *recorder) CaughtUp() {
	r.mu.Lock()
	r.events = append(r.events, "caught up")
	r.mu.Unlock()
}

// Missed purges that come ahead of the snapshot are applied in order; the
// node is caught up only once the snapshot's have been applied too; and of
// their results only the errors and one applied revision are sent: results
// that say no more than "applied" wait together, and the newest answers
// for the others.
func TestMissedPurgesAheadOfTheSnapshot(t *testing.T) {
	purges := func(ids ...string) []*pb.Purge {
		var ps []*pb.Purge
		for _, id := range ids {
			ps = append(ps, &pb.Purge{Id: id})
		}
		return ps
	}
	results := make(chan string, 16)
	c := startControl(t, func(n int, stream pb.NodeService_SessionServer) error {
		for _, b := range [][]*pb.Purge{purges("p1", "p-err", "p3"), purges("p4", "p5")} {
			if err := stream.Send(&pb.SessionResponse{Msg: &pb.SessionResponse_MissedPurges{MissedPurges: &pb.MissedPurges{Purges: b}}}); err != nil {
				return err
			}
		}
		snap := snapshot(1, 0)
		snap.GetSnapshot().Purges = purges("p6", "p7")
		if err := stream.Send(snap); err != nil {
			return err
		}
		for {
			req, err := stream.Recv()
			if err != nil {
				return err
			}
			if r := req.GetPurgeResult(); r != nil {
				results <- r.GetPurgeId()
			}
		}
	})
	rec := &recorder{}
	runClientWith(t, c, rec, Config{Addresses: []string{c.addr}, Member: &pb.Member{Id: "node-1", PeerAddress: "127.0.0.1:9001"},
		MinBackoff: time.Millisecond, MaxBackoff: 5 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(testLog{t}, nil))})
	var got []string
	for len(got) < 2 {
		select {
		case id := <-results:
			got = append(got, id)
		case <-time.After(time.Minute):
			t.Fatalf("results %v after a minute, want two", got)
		}
	}
	if want := []string{"p-err", "p7"}; strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("results sent %v, want %v: the error, and the newest applied revision for the rest", got, want)
	}
	select {
	case id := <-results:
		t.Errorf("result %s sent after the newest applied revision", id)
	default:
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if want := "p1,p-err,p3,p4,p5,p6,p7,caught up"; strings.Join(rec.events, ",") != want {
		t.Errorf("applied %v, want %s", rec.events, want)
	}
}

// A control plane that refuses the join token is reachable: the node says
// the token was refused (and /readyz why), never "unreachable".
func TestAWrongJoinTokenIsNotAnOutage(t *testing.T) {
	c := startControl(t, func(int, pb.NodeService_SessionServer) error {
		return status.Error(codes.Unauthenticated, "node session: missing or wrong join token")
	})
	var logs syncLog
	cl := runClient(t, c, func(cfg *Config) { cfg.Logger = slog.New(slog.NewTextHandler(&logs, nil)) })
	c.waitHellos(t, 3)
	if ok, why := cl.Member(); ok || !strings.Contains(why, "wrong join token") {
		t.Fatalf("member %t (%q); want not, naming the join token", ok, why)
	}
	out := logs.String()
	if strings.Contains(out, "unreachable") || !strings.Contains(out, "refused this node's join") {
		t.Fatalf("logs:\n%s\nwant the join refused, not the control plane unreachable", out)
	}
}

// syncLog is a log destination safe to read while the client writes.
type syncLog struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *syncLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *syncLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// A control plane that is registering as many nodes as it takes at once
// refuses a hello as busy and says when to retry: the node says hello
// again no sooner than that (less the 20 % spread), and stays a member
// meanwhile, serving with the ring it has.
func TestABusyControlPlaneIsAskedAgainWhenItSaid(t *testing.T) {
	const delay = 400 * time.Millisecond
	var refusedAt, askedAt atomic.Int64 // UnixNano
	c := startControl(t, func(n int, stream pb.NodeService_SessionServer) error {
		switch n {
		case 1:
			if err := stream.Send(snapshot(1, 0)); err != nil {
				return err
			}
			return status.Error(codes.Unavailable, "replica restarting")
		case 2:
			refusedAt.Store(time.Now().UnixNano())
			st, _ := status.New(codes.Unavailable, "busy").WithDetails(
				&errdetails.ErrorInfo{Reason: pb.SessionEnd_SESSION_END_BUSY.String(), Domain: pb.SessionEndDomain},
				&errdetails.RetryInfo{RetryDelay: durationpb.New(delay)})
			return st.Err()
		}
		if n == 3 {
			askedAt.Store(time.Now().UnixNano())
		}
		if err := stream.Send(snapshot(1, 0)); err != nil {
			return err
		}
		<-stream.Context().Done()
		return nil
	})
	var lost atomic.Int32
	cl := runClient(t, c, func(cfg *Config) {
		cfg.OnMembership = func(member bool, _, _ string) {
			if !member {
				lost.Add(1)
			}
		}
	})
	c.waitHellos(t, 3)
	waitFor(t, cl.Connected)
	if waited := time.Duration(askedAt.Load() - refusedAt.Load()); waited < delay*4/5 {
		t.Fatalf("hello again %s after the busy refusal, want at least %s", waited, delay*4/5)
	}
	if ok, why := cl.Member(); !ok || lost.Load() != 0 {
		t.Fatalf("member %t (%q), %d losses of membership; a busy refusal is none", ok, why, lost.Load())
	}
}
