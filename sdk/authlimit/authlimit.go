// Package authlimit bounds failed authentications per caller, so that an
// endpoint that checks a secret cannot be used to guess it: each caller
// has a bucket of Burst failures, refilled one per Every.
//
// What it never does is refuse a caller because of another's failures:
// every caller has a bucket of its own (callers are keyed by Key, an IPv6
// address by its /64), and at the bound on callers tracked the one whose
// last failure is oldest is forgotten, never shared. Check goes further and
// throttles the work of verifying rather than the caller: a caller out of
// failures is still verified, once its bucket refills, so a right
// credential passes while guesses come no faster than one per Every.
//
// The control plane and the nodes both use it.
package authlimit

import (
	"context"
	"errors"
	"net/netip"
	"sync"
	"time"
)

// Errors of Check.
var (
	// ErrWrong: the credential was verified and is wrong.
	ErrWrong = errors.New("authlimit: wrong credential")
	// ErrThrottled: the caller is out of failures and another of its
	// attempts is waiting to be verified, or the wait would outlast the
	// call; refused unread.
	ErrThrottled = errors.New("authlimit: too many failed attempts; try later")
)

// Limiter is safe for concurrent use.
type Limiter struct {
	every time.Duration
	burst float64
	max   int
	now   func() time.Time

	mu      sync.Mutex
	callers map[string]*bucket
}

type bucket struct {
	tokens  float64
	at      time.Time // of the last refill
	failed  time.Time // of the last failure
	waiting bool      // an attempt waits in Check
}

// New allows burst failures per caller, then one per every, tracking at
// most max callers.
func New(every time.Duration, burst, max int) *Limiter {
	return &Limiter{every: every, burst: float64(burst), max: max, now: time.Now, callers: map[string]*bucket{}}
}

// Key is the caller key of an address: the address itself, or for IPv6
// its /64 (one host holds a whole /64, and would otherwise have a bucket
// per address). Anything that is no address is its own key.
func Key(addr string) string {
	a, err := netip.ParseAddr(addr)
	if err != nil {
		return addr
	}
	if a = a.Unmap(); a.Is6() {
		p, _ := a.Prefix(64)
		return p.String()
	}
	return a.String()
}

// refill brings b up to now.
func (l *Limiter) refill(b *bucket, now time.Time) {
	if !b.at.IsZero() {
		b.tokens = min(l.burst, b.tokens+float64(now.Sub(b.at))/float64(l.every))
	}
	b.at = now
}

// getLocked is caller's bucket, made when it has none. At the bound it
// forgets callers with nothing against them, else the one whose last
// failure is oldest (never one with an attempt waiting); nil when every
// tracked caller has one waiting.
func (l *Limiter) getLocked(caller string, now time.Time) *bucket {
	if b, ok := l.callers[caller]; ok {
		l.refill(b, now)
		return b
	}
	if len(l.callers) >= l.max {
		var oldest string
		for c, b := range l.callers {
			if l.refill(b, now); b.tokens >= l.burst && !b.waiting {
				delete(l.callers, c) // nothing against it any more
				continue
			}
			if !b.waiting && (oldest == "" || b.failed.Before(l.callers[oldest].failed)) {
				oldest = c
			}
		}
		if len(l.callers) >= l.max {
			if oldest == "" {
				return nil
			}
			delete(l.callers, oldest)
		}
	}
	b := &bucket{tokens: l.burst, at: now}
	l.callers[caller] = b
	return b
}

// Allow reports whether caller may try to authenticate now; when not, how
// long until it may. (Check, which verifies a throttled caller after a
// wait instead, is the stronger guarantee; Allow refuses it unread.)
func (l *Limiter) Allow(caller string, now time.Time) (bool, time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.getLocked(caller, now)
	if b == nil || b.tokens >= 1 {
		return true, 0
	}
	return false, time.Duration((1 - b.tokens) * float64(l.every))
}

// Fail records a failed authentication by caller.
func (l *Limiter) Fail(caller string, now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if b := l.getLocked(caller, now); b != nil {
		b.tokens = max(0, b.tokens-1)
		b.failed = now
	}
}

// Check verifies caller's credential with verify, within the limits:
//   - a caller with failures to spare is verified at once;
//   - one without waits until its bucket has refilled a failure's worth,
//     one attempt at a time, then is verified: a right credential passes;
//   - a wrong credential is charged to the caller (ErrWrong);
//   - a caller out of failures with an attempt already waiting, or whose
//     wait would outlast ctx, is refused unread (ErrThrottled).
//
// A caller beyond the bound when every tracked caller waits is verified
// at once, and a wrong credential of its answered after one Every.
func (l *Limiter) Check(ctx context.Context, caller string, verify func() bool) error {
	now := l.now()
	l.mu.Lock()
	b := l.getLocked(caller, now)
	switch {
	case b == nil:
		l.mu.Unlock()
		if verify() {
			return nil
		}
		return l.sleep(ctx, l.every, ErrWrong)
	case b.tokens >= 1:
		l.mu.Unlock()
	case b.waiting:
		l.mu.Unlock()
		return ErrThrottled
	default:
		wait := time.Duration((1 - b.tokens) * float64(l.every))
		if dl, ok := ctx.Deadline(); ok && dl.Sub(now) < wait {
			l.mu.Unlock()
			return ErrThrottled
		}
		b.waiting = true
		l.mu.Unlock()
		err := l.sleep(ctx, wait, nil)
		l.mu.Lock()
		b.waiting = false
		l.mu.Unlock()
		if err != nil {
			return err
		}
	}
	if verify() {
		return nil
	}
	l.Fail(caller, l.now())
	return ErrWrong
}

// sleep waits d, or until ctx ends (its error); then returns err.
func (l *Limiter) sleep(ctx context.Context, d time.Duration, err error) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Tracked is the number of callers with a bucket of their own.
func (l *Limiter) Tracked() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.callers)
}
