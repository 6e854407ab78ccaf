// Package authlimit bounds failed authentications per caller, so that an
// endpoint that checks a secret cannot be used to guess it: each caller
// has a bucket of Burst failures, refilled one per Every; a caller whose
// bucket is empty is refused before its secret is looked at. The callers
// tracked are bounded; at the bound, callers without a failure to their
// name are forgotten first, and new ones beyond it share one bucket. The
// control plane and the nodes both use it.
package authlimit

import (
	"sync"
	"time"
)

// Limiter is safe for concurrent use.
type Limiter struct {
	every time.Duration
	burst float64
	max   int

	mu       sync.Mutex
	callers  map[string]*bucket
	overflow bucket
}

type bucket struct {
	tokens float64
	at     time.Time
}

// New allows burst failures per caller, then one per every, tracking at
// most max callers.
func New(every time.Duration, burst, max int) *Limiter {
	return &Limiter{every: every, burst: float64(burst), max: max, callers: map[string]*bucket{},
		overflow: bucket{tokens: float64(burst)}}
}

// refill brings b up to now.
func (l *Limiter) refill(b *bucket, now time.Time) {
	if !b.at.IsZero() {
		b.tokens = min(l.burst, b.tokens+float64(now.Sub(b.at))/float64(l.every))
	}
	b.at = now
}

// get is caller's bucket, made when it has none.
func (l *Limiter) get(caller string, now time.Time) *bucket {
	if b, ok := l.callers[caller]; ok {
		l.refill(b, now)
		return b
	}
	if len(l.callers) >= l.max {
		for c, b := range l.callers {
			if l.refill(b, now); b.tokens >= l.burst {
				delete(l.callers, c) // nothing against it any more
			}
		}
		if len(l.callers) >= l.max {
			l.refill(&l.overflow, now)
			return &l.overflow
		}
	}
	b := &bucket{tokens: l.burst, at: now}
	l.callers[caller] = b
	return b
}

// Allow reports whether caller may try to authenticate now; when not, how
// long until it may.
func (l *Limiter) Allow(caller string, now time.Time) (bool, time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.get(caller, now)
	if b.tokens >= 1 {
		return true, 0
	}
	return false, time.Duration((1 - b.tokens) * float64(l.every))
}

// Fail records a failed authentication by caller.
func (l *Limiter) Fail(caller string, now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.get(caller, now)
	b.tokens = max(0, b.tokens-1)
}

// Tracked is the number of callers with a bucket of their own.
func (l *Limiter) Tracked() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.callers)
}
