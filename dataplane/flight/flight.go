// Package flight collapses concurrent cache misses for one key into one
// origin request. Unlike a plain singleflight, the leader may settle the
// call early (for example when the response turns out not to be cacheable)
// and keep streaming its own response, while the waiters are released to
// fetch for themselves — the behaviour of nginx's proxy_cache_lock.
package flight

import (
	"context"
	"sync"
)

// Call is one in-flight fetch of a key.
type Call[T any] struct {
	done chan struct{}
	val  T
	ok   bool
}

// Group tracks the calls in flight. The zero value is ready to use.
type Group[T any] struct {
	mu    sync.Mutex
	calls map[string]*Call[T]
}

// Join returns the call in flight for key, or starts one. leader is true for
// the caller that started it; that caller must call Settle exactly once.
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
