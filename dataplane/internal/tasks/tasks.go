// Package tasks runs the goroutines of a node's work that no client waits
// on (fills streaming into the store, background revalidations, pre-copies,
// invalidations, purge reports): each is owned by a Group, which stops them
// through one context and waits for them, and a panic in one is recovered
// and reported, never fatal. It imports nothing of the data plane.
package tasks

import (
	"context"
	"runtime/debug"
	"sync"
	"time"
)

// Group owns background tasks. Its zero value is not usable; see New.
type Group struct {
	wg      sync.WaitGroup
	ctx     context.Context
	cancel  context.CancelFunc
	onPanic func(task string, v any, stack []byte)
}

// New returns a group whose tasks' panics are reported to onPanic.
func New(onPanic func(task string, v any, stack []byte)) *Group {
	g := &Group{onPanic: onPanic}
	g.ctx, g.cancel = context.WithCancel(context.Background())
	return g
}

// Context ends when the group stops: tasks stop their work by it.
func (g *Group) Context() context.Context { return g.ctx }

// Go runs f on a goroutine the group waits for, guarded.
func (g *Group) Go(task string, f func()) { g.wg.Go(g.Guard(task, f)) }

// Guard wraps f so that a panic in it is reported, never fatal.
func (g *Group) Guard(task string, f func()) func() {
	return func() {
		defer func() {
			if v := recover(); v != nil {
				g.onPanic(task, v, debug.Stack())
			}
		}()
		f()
	}
}

// Stop ends the group's context and waits for its tasks.
func (g *Group) Stop() {
	g.cancel()
	g.wg.Wait()
}

// Every calls f every period until ctx ends.
func Every(ctx context.Context, period time.Duration, f func()) {
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			f()
		}
	}
}
