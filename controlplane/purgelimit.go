package controlplane

import (
	"sync"
	"time"
)

// purgeLimiter bounds the purges each caller (its address) may make: a
// bucket of burst purges per caller, refilled at rate a second, so that a
// storm of purges from one client cannot hold back the purges of the
// others. The callers tracked are bounded: at the bound, callers whose
// bucket is full again are forgotten, and new ones beyond it share one
// bucket.
type purgeLimiter struct {
	rate  float64
	burst float64
	max   int

	mu       sync.Mutex
	callers  map[string]*purgeBucket
	overflow purgeBucket
}

type purgeBucket struct {
	tokens float64
	at     time.Time
}

func newPurgeLimiter(rate float64, burst, max int) *purgeLimiter {
	return &purgeLimiter{rate: rate, burst: float64(burst), max: max, callers: map[string]*purgeBucket{},
		overflow: purgeBucket{tokens: float64(burst)}}
}

func (l *purgeLimiter) refill(b *purgeBucket, now time.Time) {
	if !b.at.IsZero() {
		b.tokens = min(l.burst, b.tokens+now.Sub(b.at).Seconds()*l.rate)
	}
	b.at = now
}

// take spends one of caller's purges; when it has none, it says how long
// until it has one.
func (l *purgeLimiter) take(caller string, now time.Time) (bool, time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	b, ok := l.callers[caller]
	switch {
	case ok:
		l.refill(b, now)
	case len(l.callers) >= l.max:
		for c, cb := range l.callers {
			if l.refill(cb, now); cb.tokens >= l.burst {
				delete(l.callers, c)
			}
		}
		if len(l.callers) >= l.max {
			b = &l.overflow
			l.refill(b, now)
			break
		}
		fallthrough
	default:
		b = &purgeBucket{tokens: l.burst, at: now}
		l.callers[caller] = b
	}
	if b.tokens < 1 {
		return false, time.Duration((1 - b.tokens) / l.rate * float64(time.Second))
	}
	b.tokens--
	return true, 0
}
