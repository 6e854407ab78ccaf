// Package gcheadroom lets a cache node's heap grow to the node's memory
// budget before the collector runs. A node's heap is mostly its memory
// tier, which may grow to the budget; at GOGC's default (100) a heap of
// live bytes is collected once it has grown by as much again, so while the
// tier is far from full (a small working set, or a node just started) the
// collector runs every few megabytes allocated, and each cycle's mark
// phase shares the node's P with the requests it serves. Keep raises the
// percentage after each collection so that the next one comes when the
// heap reaches the budget, or has grown MaxGrowth past the live heap,
// whichever is first, while that is more than the live heap again; from
// then on the default applies. The heap's peak is then the larger of
// twice the live heap and the smaller of the budget and the live heap plus
// MaxGrowth: never above what the default gives a node whose tier is at
// least half full.
//
// MaxGrowth bounds the headroom because memory the heap grows into is
// memory the kernel hands the process page by page, one fault each, the
// first time it is touched: with a budget far above the working set (the
// bench's S1, 4 MiB of hot objects, with a 1 GiB budget) a node swept
// through fresh pages until its heap reached the budget, 5,000 to 7,000
// faults a second, and a hit cost 36 to 43 µs of CPU against 25 with a
// 64 MiB budget. Bounded, the heap reuses what the last collection freed
// once it has grown MaxGrowth: the faults stop within seconds, and a hit
// cost 30 µs.
package gcheadroom

import (
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync/atomic"
)

// MaxGrowth is how far past the live heap Keep lets the heap grow.
const MaxGrowth = 256 << 20

// Percent is the collector's percentage that lets a live heap of live
// bytes grow to budget bytes, or MaxGrowth past live if that is less,
// before the next collection, and never less than the default 100. roots
// are the stacks and globals the last collection scanned: the collector
// grows the heap by the percentage of the live heap and its roots both,
// and to no less than the percentage of its 4 MiB minimum heap, which at
// the percentages of a small live heap is the larger (a 2 MiB live heap
// with a 128 MiB budget was let grow to 250 MB).
func Percent(live, roots, budget uint64) int {
	target := min(budget, live+MaxGrowth)
	if live == 0 || target <= 2*live+roots {
		return 100
	}
	p := min((target-live)*100/(live+roots), target*100/minimumHeap, 1<<20)
	return int(max(p, 100))
}

// minimumHeap is the Go collector's minimum heap goal at GOGC 100, which
// it scales by the percentage (runtime's defaultHeapMinimum).
const minimumHeap = 4 << 20

// The runtime's metrics Keep reads after each collection.
var samples = []string{"/gc/heap/live:bytes", "/gc/scan/stack:bytes", "/gc/scan/globals:bytes"}

// Keep sets the collector's percentage to Percent(live heap, roots,
// budget) after every collection, until stop is called (which restores
// the default).
// set, when not nil, is told each percentage set.
func Keep(budget uint64, set func(percent int)) (stop func()) {
	k := &keeper{budget: budget, set: set, last: -1, sample: make([]metrics.Sample, len(samples))}
	for i, name := range samples {
		k.sample[i].Name = name
	}
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
	var v [3]uint64
	for i, s := range k.sample {
		if s.Value.Kind() != metrics.KindUint64 {
			return
		}
		v[i] = s.Value.Uint64()
	}
	p := Percent(v[0], v[1]+v[2], k.budget)
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
