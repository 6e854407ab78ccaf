// Package gcheadroom lets a cache node's heap grow to the node's memory
// budget before the collector runs. A node's heap is mostly its memory
// tier, which may grow to the budget; at GOGC's default (100) a heap of
// live bytes is collected once it has grown by as much again, so while the
// tier is far from full (a small working set, or a node just started) the
// collector runs every few megabytes allocated, and each cycle's mark
// phase shares the node's P with the requests it serves. Keep raises the
// percentage after each collection so that the next one comes when the
// heap reaches the budget, while the live heap is under half of it; from
// then on the default applies. The heap's peak is then the larger of the
// budget and twice the live heap: never above what the default gives a
// node whose tier is at least half full.
package gcheadroom

import (
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync/atomic"
)

// Percent is the collector's percentage that lets a live heap of live
// bytes grow to budget bytes before the next collection, and never less
// than the default 100.
func Percent(live, budget uint64) int {
	if live == 0 || budget <= 2*live {
		return 100
	}
	return int(min((budget-live)*100/live, 1<<20))
}

// liveHeap is the runtime's live heap metric.
const liveHeap = "/gc/heap/live:bytes"

// Keep sets the collector's percentage to Percent(live heap, budget) after
// every collection, until stop is called (which restores the default).
// set, when not nil, is told each percentage set.
func Keep(budget uint64, set func(percent int)) (stop func()) {
	k := &keeper{budget: budget, set: set, last: -1, sample: []metrics.Sample{{Name: liveHeap}}}
	k.adjust()
	k.arm()
	return func() {
		k.stopped.Store(true)
		debug.SetGCPercent(100)
	}
}

type keeper struct {
	budget  uint64
	set     func(int)
	stopped atomic.Bool
	// last and sample belong to the finalizer goroutine after Keep.
	last   int
	sample []metrics.Sample
}

// sentinel is garbage from birth: its finalizer runs after the collection
// that finds it, once per cycle, and arms the next one.
type sentinel struct{ k *keeper }

func (k *keeper) arm() {
	runtime.SetFinalizer(&sentinel{k}, func(s *sentinel) {
		if s.k.stopped.Load() {
			return
		}
		s.k.adjust()
		s.k.arm()
	})
}

func (k *keeper) adjust() {
	metrics.Read(k.sample)
	if k.sample[0].Value.Kind() != metrics.KindUint64 {
		return
	}
	p := Percent(k.sample[0].Value.Uint64(), k.budget)
	// Set again only on a change of more than an eighth: setting it
	// recomputes the pacer's goal, which is not free.
	if k.last < 0 || p > k.last+k.last/8 || p < k.last-k.last/8 {
		debug.SetGCPercent(p)
		k.last = p
		if k.set != nil {
			k.set(p)
		}
	}
}
