// Package wait bounds waiting, never working: an upstream request (to the
// origin, to a peer) may take as long as its body keeps coming, but not
// longer than a bound to send its first byte (the response header), nor
// longer than a bound between reads that return nothing. A slow client,
// which is the reader's pace, never counts: the idle clock runs only while
// a Read waits on the upstream. It imports nothing of the data plane.
package wait

import (
	"context"
	"io"
	"time"
)

// Watch bounds one upstream exchange.
type Watch struct {
	cancel context.CancelFunc
	idle   time.Duration
	timer  *time.Timer
}

// Start returns a context for the exchange, ended if the answer's header
// has not come (Answered) within first, and the Watch. Stop releases it.
// first <= 0 sets no first-byte bound here (the transport has one that
// starts once a request body is sent).
func Start(parent context.Context, first, idle time.Duration) (context.Context, *Watch) {
	ctx, cancel := context.WithCancel(parent)
	w := &Watch{cancel: cancel, idle: idle}
	if first > 0 {
		w.timer = time.AfterFunc(first, cancel)
	} else {
		w.timer = time.AfterFunc(time.Hour, cancel)
		w.timer.Stop()
	}
	return ctx, w
}

// Answered says the header came: the first-byte bound no longer runs.
func (w *Watch) Answered() { w.timer.Stop() }

// Body wraps an answer's body: a Read that waits longer than the idle
// bound ends the exchange, and so the Read.
func (w *Watch) Body(rc io.ReadCloser) io.ReadCloser { return &idleBody{rc: rc, w: w} }

// Stop ends the exchange's context and its timer.
func (w *Watch) Stop() {
	w.timer.Stop()
	w.cancel()
}

type idleBody struct {
	rc io.ReadCloser
	w  *Watch
}

func (b *idleBody) Read(p []byte) (int, error) {
	b.w.timer.Reset(b.w.idle)
	n, err := b.rc.Read(p)
	b.w.timer.Stop()
	return n, err
}

func (b *idleBody) Close() error { return b.rc.Close() }
