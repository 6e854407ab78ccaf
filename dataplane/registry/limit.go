package registry

import (
	"context"
	"io"
	"sync"
	"time"
)

// rateLimit is a token bucket of bytes a second shared by every fill from
// one upstream: a read past the rate waits for it, so the link is shared,
// never the transfer cut.
type rateLimit struct {
	mu    sync.Mutex
	rate  float64 // bytes a second
	avail float64 // bytes that may be read now; negative: owed
	last  time.Time
}

func newRateLimit(bytesPerSecond int64) *rateLimit {
	return &rateLimit{rate: float64(bytesPerSecond), avail: float64(bytesPerSecond), last: time.Now()}
}

// take counts n bytes read and says how long to wait before the next read.
func (l *rateLimit) take(n int, now time.Time) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.avail = min(l.rate, l.avail+now.Sub(l.last).Seconds()*l.rate) - float64(n)
	l.last = now
	if l.avail >= 0 {
		return 0
	}
	return time.Duration(-l.avail / l.rate * float64(time.Second))
}

// limitedReader reads at the upstream's rate.
type limitedReader struct {
	r    io.Reader
	rate *rateLimit
	ctx  context.Context
}

func (l *limitedReader) Read(p []byte) (int, error) {
	// A read is at most a tenth of a second's bytes, so waits stay short.
	if maxRead := int(l.rate.rate/10) + 1; len(p) > maxRead {
		p = p[:maxRead]
	}
	n, err := l.r.Read(p)
	if d := l.rate.take(n, time.Now()); d > 0 {
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-l.ctx.Done():
			t.Stop()
			return n, l.ctx.Err()
		}
	}
	return n, err
}
