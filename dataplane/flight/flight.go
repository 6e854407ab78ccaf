// Package flight collapses concurrent cache misses for one key into one
// origin request. Unlike a plain singleflight, the leader may settle the
// call early (for example when the response turns out not to be cacheable)
// and keep streaming its own response, while the waiters are released to
// fetch for themselves — the behaviour of nginx's proxy_cache_lock.
package flight

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// Call is one in-flight fetch of a key.
type Call[T any] struct {
	done chan struct{}
	val  T
	ok   bool
}

// Group tracks the calls in flight. The zero value is ready to use.
type Group[T any] struct {
	mu      sync.Mutex
	calls   map[string]*Call[T]
	waiting atomic.Int64 // callers of Do waiting on another's call
}

// Do leads key's call, running lead, unless a call is in flight: then it
// waits, at most wait and until ctx ends, for what that call's leader
// shares. lead gets the call (for Forget) and returns its value, whether
// waiters may share it, and whether later callers keep joining the call
// (a stream they follow from its start) until Forget. led reports whether
// lead ran (val is then its value); ok, for a waiter, whether val is
// shared with it.
func (g *Group[T]) Do(ctx context.Context, wait time.Duration, key string, lead func(*Call[T]) (val T, share, keep bool)) (val T, ok, led bool) {
	c, leader := g.Join(key)
	if leader {
		return g.Lead(key, c, lead), true, true
	}
	wctx, cancel := context.WithTimeout(ctx, wait)
	g.waiting.Add(1)
	val, ok = c.Wait(wctx)
	g.waiting.Add(-1)
	cancel()
	return val, ok, false
}

// Lead runs lead for c, a call the caller leads (Join), and settles c with
// what lead returns (see Do), or with nothing should lead panic.
func (g *Group[T]) Lead(key string, c *Call[T], lead func(*Call[T]) (val T, share, keep bool)) T {
	settled := false
	defer func() {
		if !settled {
			var zero T
			g.Settle(key, c, zero, false)
		}
	}()
	val, share, keep := lead(c)
	settled = true
	g.Settle(key, c, val, share)
	if share && !keep {
		g.Forget(key, c)
	}
	return val
}

// Waiting is the number of callers of Do waiting on another's call.
func (g *Group[T]) Waiting() int64 { return g.waiting.Load() }

// Join returns the call in flight for key, or starts one. leader is true for
// the caller that started it; that caller must call Settle exactly once
// (or Lead).
func (g *Group[T]) Join(key string) (c *Call[T], leader bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if c, ok := g.calls[key]; ok {
		return c, false
	}
	if g.calls == nil {
		g.calls = make(map[string]*Call[T])
	}
	c = &Call[T]{done: make(chan struct{})}
	g.calls[key] = c
	return c, true
}

// Settle gives the leader's answer to its waiters: ok says whether val may
// be shared. Waiters return from Wait at once. Without a value, new callers
// start a new call at once; with one, they keep joining this call, and get
// val, until the leader calls Forget (a value may be a stream that late
// callers still follow from its start).
func (g *Group[T]) Settle(key string, c *Call[T], val T, ok bool) {
	if !ok {
		g.Forget(key, c)
	}
	c.val, c.ok = val, ok
	close(c.done)
}

// Forget ends the call for new callers: the next one leads a new call.
func (g *Group[T]) Forget(key string, c *Call[T]) {
	g.mu.Lock()
	if g.calls[key] == c {
		delete(g.calls, key)
	}
	g.mu.Unlock()
}

// ForgetKey ends key's call in flight, if any, for new callers, as Forget
// does for a call the caller holds: after an invalidation of the key, the
// next caller leads a new call instead of following the old one. Those who
// joined before it go on with the old call.
func (g *Group[T]) ForgetKey(key string) {
	g.mu.Lock()
	delete(g.calls, key)
	g.mu.Unlock()
}

// Wait blocks until the leader settles or ctx ends. ok is false when the
// leader had nothing to share or ctx ended first: the caller fetches alone.
func (c *Call[T]) Wait(ctx context.Context) (val T, ok bool) {
	select {
	case <-c.done:
		return c.val, c.ok
	case <-ctx.Done():
		var zero T
		return zero, false
	}
}
