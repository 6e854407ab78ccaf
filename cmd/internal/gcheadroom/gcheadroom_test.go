package gcheadroom

import (
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"testing"
	"time"
)

func TestPercent(t *testing.T) {
	const mib = 1 << 20
	for _, c := range []struct {
		live, roots, budget uint64
		want                int
	}{
		{0, 0, 64 * mib, 100},         // no collection yet: the default
		{64 * mib, 0, 64 * mib, 100},  // a full tier: the default
		{32 * mib, 0, 64 * mib, 100},  // half full: the default reaches the budget
		{40 * mib, 0, 64 * mib, 100},  // never below the default
		{200 * mib, 0, 64 * mib, 100}, // nor past the budget's end
		{16 * mib, 0, 64 * mib, 300},  // up to the budget
		{3 * mib, 0, 10 * mib, 233},
		{1, 0, 1 << 40, 6400},               // bounded by the minimum heap: 256 MiB at 6400 %
		{16 * mib, 0, 1 << 30, 1600},        // a budget far above the live heap: MaxGrowth past it
		{100 * mib, 0, 4 << 30, 256},        // likewise
		{300 * mib, 0, 4 << 30, 100},        // MaxGrowth is less than the live heap again: the default
		{16 * mib, 0, 200 * mib, 1150},      // a budget within MaxGrowth: the budget
		{2 * mib, 6 * mib, 128 * mib, 1575}, // roots grow by the percentage too: 2 + 8 × 15.75 = 128
		{2 * mib, 0, 128 * mib, 3200},       // the minimum heap, 4 MiB × 32, is the budget
		{30 * mib, 8 * mib, 64 * mib, 100},  // with its roots the default reaches the budget
	} {
		if got := Percent(c.live, c.roots, c.budget); got != c.want {
			t.Errorf("Percent(%d, %d, %d) = %d, want %d", c.live, c.roots, c.budget, got, c.want)
		}
	}
}

// TestKeepBoundsTheHeapGoal: with a live heap far below the budget the
// collector's goal, as the runtime computes it, reaches the budget and
// not past it.
func TestKeepBoundsTheHeapGoal(t *testing.T) {
	const budget = 128 << 20
	live := make([]*[1024]byte, 0, 2048)
	for range cap(live) { // about 2 MiB live
		live = append(live, new([1024]byte))
	}
	runtime.GC()
	set := make(chan int, 16)
	stop := Keep(budget, func(p int) { set <- p })
	defer stop()
	waitFor(t, set, func(p int) bool { return p > 100 })
	goal := []metrics.Sample{{Name: "/gc/heap/goal:bytes"}}
	metrics.Read(goal)
	if g := goal[0].Value.Uint64(); g > budget+budget/64 || g < budget/2 {
		t.Errorf("heap goal %d bytes at %d %%, want about the budget, %d", g, current(), budget)
	}
	runtime.KeepAlive(live)
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
