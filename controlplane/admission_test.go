package controlplane

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/shardcache/shardcache/proto/shardcache/v1"
)

// busyOf returns the code, session end and retry delay of a refusal.
func busyOf(t *testing.T, err error) (codes.Code, pb.SessionEnd, time.Duration) {
	t.Helper()
	code, end := sessionEndOf(t, err)
	for _, d := range status.Convert(err).Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok {
			return code, end, ri.GetRetryDelay().AsDuration()
		}
	}
	return code, end, 0
}

// At most the bound registers at once; a hello beyond it waits its turn,
// and one beyond the waiting bound, or whose wait runs out, is refused as
// busy with a delay to retry after; refusals in a row are given turns one
// after another.
func TestRegistrationsAtOnceAreBounded(t *testing.T) {
	r := newRegistrations(2, time.Minute)
	r.maxWaiting = 1
	ctx := context.Background()
	first, err := r.enter(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.enter(ctx); err != nil {
		t.Fatal(err)
	}
	third := make(chan error, 1)
	go func() {
		_, err := r.enter(ctx)
		third <- err
	}()
	waitFor(t, func() bool { return r.waiting.Load() == 1 }) // the third waits
	// The waiting bound is reached: a fourth is refused at once.
	_, err = r.enter(ctx)
	if code, end, delay := busyOf(t, err); code != codes.Unavailable || end != pb.SessionEnd_SESSION_END_BUSY || delay < minRetryDelay {
		t.Fatalf("a hello past the waiting bound: %v, %v, retry in %s; want UNAVAILABLE, BUSY, at least %s", code, end, delay, minRetryDelay)
	}
	select {
	case err := <-third:
		t.Fatalf("the third registration went ahead of a free turn: %v", err)
	default:
	}
	first()
	first() // a second call frees nothing more
	if err := <-third; err != nil {
		t.Fatalf("the waiting registration once a turn was free: %v", err)
	}
	if len(r.slots) != 2 {
		t.Fatalf("%d registrations in flight, want 2", len(r.slots))
	}

	// A wait that runs out is refused; refusals in a row get later turns,
	// each a registration's share of the bound after the one before.
	r.wait = 10 * time.Millisecond
	_, err = r.enter(ctx)
	if code, end, _ := busyOf(t, err); code != codes.Unavailable || end != pb.SessionEnd_SESSION_END_BUSY {
		t.Fatalf("a hello whose wait ran out: %v, %v; want UNAVAILABLE, BUSY", code, end)
	}
	r.mu.Lock()
	r.took, r.booked = 8*time.Second, time.Time{}
	r.mu.Unlock()
	per := 4 * time.Second // 8 s a registration, two at once
	var delays []time.Duration
	for range 3 {
		_, err := r.enter(ctx)
		_, _, d := busyOf(t, err)
		delays = append(delays, d)
	}
	for i := 1; i < len(delays); i++ {
		if step := delays[i] - delays[i-1]; step < per-time.Second || step > per+time.Second {
			t.Fatalf("retry delays %v: want each %s after the one before", delays, per)
		}
	}
	// Turns past the longest delay a node is told are spread over its
	// second half, not all told the same.
	r.mu.Lock()
	r.took, r.booked = time.Hour, time.Time{}
	r.mu.Unlock()
	seen := map[time.Duration]bool{}
	for range 5 {
		_, err := r.enter(ctx)
		_, _, d := busyOf(t, err)
		if d < maxRetryDelay/2 || d >= maxRetryDelay {
			t.Fatalf("a turn past %s: retry in %s, want within its second half", maxRetryDelay, d)
		}
		seen[d] = true
	}
	if len(seen) < 2 {
		t.Fatalf("five refusals past the longest delay were all told %v", seen)
	}
}

// A turn not ended (a node that stopped reading its snapshot) ends by
// itself after the hold, and the next hello gets it.
func TestARegistrationTurnEndsByItself(t *testing.T) {
	r := newRegistrations(1, time.Minute)
	r.hold = 10 * time.Millisecond
	ctx := context.Background()
	if _, err := r.enter(ctx); err != nil {
		t.Fatal(err)
	}
	end, err := r.enter(ctx) // waits for the first turn's hold to pass
	if err != nil {
		t.Fatalf("the hello after a turn never ended: %v", err)
	}
	end()
	if len(r.slots) != 0 {
		t.Fatalf("%d turns held after both ended", len(r.slots))
	}
}

// Many nodes saying hello at once to a replica that registers one at a
// time all get their snapshots, none refused: a session's turn ends with
// its snapshot, not with the session.
func TestAStormOfHellosIsRegisteredInTurn(t *testing.T) {
	s, _, _ := startServer(t, nil, func(c *Config) { c.MaxRegistering = 1 })
	conn := dial(t, s)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	errs := make(chan error, 20)
	for i := range 20 {
		go func() {
			_, err := helloUntilSnapshot(ctx, conn, fmt.Sprint("node-", i))
			errs <- err
		}()
	}
	for range 20 {
		if err := <-errs; err != nil {
			t.Fatalf("a hello of the storm: %v", err)
		}
	}
	if got := testutil.ToFloat64(s.metrics.busy); got != 0 {
		t.Fatalf("%v hellos refused as busy, want none", got)
	}

	// A hello while the only turn is taken waits for it.
	end, err := s.admit.enter(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan *pb.Snapshot, 1)
	go func() {
		snap, _ := helloUntilSnapshot(ctx, conn, "late")
		got <- snap
	}()
	waitFor(t, func() bool { return s.admit.waiting.Load() == 1 })
	select {
	case <-got:
		t.Fatal("a hello was registered while the only turn was taken")
	default:
	}
	end()
	if snap := <-got; snap.GetMember().GetId() != "late" {
		t.Fatalf("snapshot %v, want late's", snap)
	}
}

// helloUntilSnapshot says hello as node id and reads the session until its
// snapshot; it may run off the test's goroutine.
func helloUntilSnapshot(ctx context.Context, conn *grpc.ClientConn, id string) (*pb.Snapshot, error) {
	stream, err := pb.NewNodeServiceClient(conn).Session(ctx)
	if err != nil {
		return nil, err
	}
	if err := stream.Send(&pb.SessionRequest{Msg: &pb.SessionRequest_Hello{Hello: &pb.Hello{
		Member: &pb.Member{Id: id, PeerAddress: "127.0.0.1:9999"}}}}); err != nil {
		return nil, err
	}
	for {
		resp, err := stream.Recv()
		if err != nil {
			return nil, err
		}
		if snap := resp.GetSnapshot(); snap != nil {
			return snap, nil
		}
	}
}
