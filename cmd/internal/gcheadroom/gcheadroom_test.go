package gcheadroom

import (
	"runtime"
	"runtime/debug"
	"testing"
	"time"
)

func TestPercent(t *testing.T) {
	const mib = 1 << 20
	for _, c := range []struct {
		live, budget uint64
		want         int
	}{
		{0, 64 * mib, 100},         // no collection yet: the default
		{64 * mib, 64 * mib, 100},  // a full tier: the default
		{32 * mib, 64 * mib, 100},  // half full: the default reaches the budget
		{40 * mib, 64 * mib, 100},  // never below the default
		{200 * mib, 64 * mib, 100}, // nor past the budget's end
		{16 * mib, 64 * mib, 300},  // up to the budget
		{3 * mib, 10 * mib, 233},
		{1, 1 << 40, 1 << 20},       // bounded
		{16 * mib, 1 << 30, 1600},   // a budget far above the live heap: MaxGrowth past it
		{100 * mib, 4 << 30, 256},   // likewise
		{300 * mib, 4 << 30, 100},   // MaxGrowth is less than the live heap again: the default
		{16 * mib, 200 * mib, 1150}, // a budget within MaxGrowth: the budget
	} {
		if got := Percent(c.live, c.budget); got != c.want {
			t.Errorf("Percent(%d, %d) = %d, want %d", c.live, c.budget, got, c.want)
		}
	}
}

// current is the collector's percentage now.
func current() int {
	p := debug.SetGCPercent(100)
	debug.SetGCPercent(p)
	return p
}

// TestKeepFollowsTheLiveHeap: the percentage lets a small live heap grow
// to the budget, comes back to the default once the live heap is over half
// the budget (set again after a collection, not only at the start), and
// is the default once stopped.
func TestKeepFollowsTheLiveHeap(t *testing.T) {
	const budget = 64 << 20
	runtime.GC() // a live heap measured, well below half the budget
	set := make(chan int, 16)
	stop := Keep(budget, func(p int) { set <- p })
	defer stop()
	first := <-set // set at once, from the last collection's live heap
	if first <= 100 || current() != first {
		t.Fatalf("at the start: set %d, current %d; want above 100 with a live heap below %d bytes", first, current(), budget/2)
	}
	big := make([]byte, budget) // live, and more than half the budget
	for i := range big {
		big[i] = 1
	}
	waitFor(t, set, func(p int) bool { return p == 100 })
	runtime.KeepAlive(big)
	if current() != 100 {
		t.Fatalf("with a live heap above half the budget: current %d, want 100", current())
	}
	big = nil
	stop()
	runtime.GC()
	runtime.GC()
	if current() != 100 {
		t.Fatalf("after stop: current %d, want 100", current())
	}
}

// waitFor collects until a percentage set satisfies ok; each collection
// runs the keeper once.
func waitFor(t *testing.T, set <-chan int, ok func(int) bool) {
	t.Helper()
	var seen []int
	for range 100 {
		runtime.GC()
		select {
		case p := <-set:
			if ok(p) {
				return
			}
			seen = append(seen, p)
		case <-time.After(100 * time.Millisecond): // the finalizer runs after the collection
		}
	}
	t.Fatalf("no percentage as wanted after 100 collections; set %v", seen)
}
