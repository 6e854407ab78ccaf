package controlplane

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	pb "github.com/shardcache/shardcache/proto/shardcache/v1"
)

// Defaults of the registration bound.
const (
	// defaultMaxRegistering is how many sessions a replica registers at
	// once (from the hello to the snapshot sent): each costs a few etcd
	// requests, and a replica's restart brings every node's hello within
	// one backoff.
	defaultMaxRegistering = 32
	// defaultMaxMembers bounds the ring's members (Config.MaxMembers).
	defaultMaxMembers = 16384
	// registerWait bounds how long a hello waits for its turn: well
	// within the 30 s a node waits for its snapshot.
	registerWait = 15 * time.Second
	// registerHold bounds a turn: a node that stops reading while its
	// snapshot is sent (its connection alive, its process wedged) gives
	// the turn up after this long, so that a few such nodes cannot stop
	// every registration.
	registerHold = 10 * time.Second
	// Bounds of the delay a refused node is told to wait.
	minRetryDelay, maxRetryDelay = time.Second, time.Minute
	// assumedRegistration is what a registration is taken to cost before
	// one was measured.
	assumedRegistration = 100 * time.Millisecond
)

// registrations bounds the sessions a replica registers at once, so that a
// storm of hellos (every node at once after a replica's restart) costs etcd
// no more than that many registrations in flight, rather than timeouts
// and "too many requests" for all of them, retries that write again, and
// a replica lease that cannot be kept alive. A hello beyond the bound waits
// its turn, up to registerWait and with at most maxWaiting others; past
// either it is refused as busy, with a RetryInfo spreading the retries
// over the time the waiting ones take.
type registrations struct {
	slots      chan struct{}
	maxWaiting int64
	wait, hold time.Duration
	waiting    atomic.Int64

	mu sync.Mutex
	// took is how long a registration took, on average (an EWMA of the
	// last ones); booked is the turn the last refused hello was given.
	took   time.Duration
	booked time.Time
}

func newRegistrations(max int, wait time.Duration) *registrations {
	return &registrations{slots: make(chan struct{}, max), maxWaiting: int64(32 * max), wait: wait, hold: registerHold}
}

// enter waits for a registration's turn and returns the function that ends
// it (safe to call more than once), or the busy refusal.
func (r *registrations) enter(ctx context.Context) (func(), error) {
	select {
	case r.slots <- struct{}{}:
		return r.leave(time.Now()), nil
	default:
	}
	if r.waiting.Add(1) > r.maxWaiting {
		r.waiting.Add(-1)
		return nil, r.busy("%d hellos wait already", r.maxWaiting)
	}
	defer r.waiting.Add(-1)
	t := time.NewTimer(r.wait)
	defer t.Stop()
	select {
	case r.slots <- struct{}{}:
		return r.leave(time.Now()), nil
	case <-t.C:
		return nil, r.busy("no turn within %s", r.wait)
	case <-ctx.Done():
		return nil, status.FromContextError(ctx.Err()).Err()
	}
}

// leave returns the function that ends a registration begun at start; it
// ends by itself after registerHold.
func (r *registrations) leave(start time.Time) func() {
	var once sync.Once
	end := func() {
		once.Do(func() {
			d := time.Since(start)
			r.mu.Lock()
			if r.took == 0 {
				r.took = d
			}
			r.took += (d - r.took) / 8
			r.mu.Unlock()
			<-r.slots
		})
	}
	hold := time.AfterFunc(r.hold, end)
	return func() {
		hold.Stop()
		end()
	}
}

// retryDelay books a refused hello a later turn: the hellos waiting now
// go first, then those refused before it, each taking the recent time of a
// registration over the bound; the delay is to that turn, within
// [minRetryDelay, maxRetryDelay]. A storm of hellos is so told to come
// back spread over the time it takes to register them all, rather than all
// again after one delay.
func (r *registrations) retryDelay() time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	took := r.took
	if took == 0 {
		took = assumedRegistration
	}
	per := took / time.Duration(cap(r.slots))
	now := time.Now()
	turn := now.Add(time.Duration(r.waiting.Load()) * per)
	if r.booked.After(turn) {
		turn = r.booked
	}
	d := turn.Sub(now)
	if d > maxRetryDelay {
		// Past what a node is told to wait: spread over the second half
		// of it, rather than all told the same, and book no further.
		return maxRetryDelay/2 + rand.N(maxRetryDelay/2)
	}
	r.booked = turn.Add(per)
	return max(d, minRetryDelay)
}

// busy is the refusal of a hello that found no turn: UNAVAILABLE, with
// SESSION_END_BUSY and the delay to retry after.
func (r *registrations) busy(format string, args ...any) error {
	delay := r.retryDelay()
	st := sessionEndStatus(codes.Unavailable, pb.SessionEnd_SESSION_END_BUSY, fmt.Sprintf(
		"this control plane replica registers %d sessions at once and has no turn for this one (%s); retry in %s",
		cap(r.slots), fmt.Sprintf(format, args...), delay.Round(time.Millisecond)))
	if d, err := st.WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(delay)}); err == nil {
		st = d
	}
	return st.Err()
}
