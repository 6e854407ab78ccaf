package sketch

import (
	"fmt"
	"sync"
	"testing"
	"time"
)

// fakeClock is moved by the test; the sketch never sleeps.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func TestCountsAreNeverUnderestimated(t *testing.T) {
	s := New(1024, time.Minute, (&fakeClock{t: time.Unix(0, 0)}).now)
	truth := map[string]uint32{}
	for i := range 20000 {
		k := fmt.Sprintf("k%d", i%3000)
		if i%7 == 0 {
			k = "hot"
		}
		truth[k]++
		s.Observe(k)
	}
	for k, n := range truth {
		if est := s.Estimate(k); est < n {
			t.Fatalf("%s: estimate %d below its true count %d", k, est, n)
		}
	}
	// The hot key stands out from the tail despite collisions.
	if hot, tail := s.Estimate("hot"), s.Estimate("k1"); hot < 5*tail {
		t.Fatalf("hot key estimate %d does not stand out from a tail key's %d", hot, tail)
	}
}

func TestDecayHalvesAndForgets(t *testing.T) {
	clock := &fakeClock{t: time.Unix(0, 0)}
	s := New(1024, time.Minute, clock.now)
	for range 100 {
		s.Observe("k")
	}
	clock.advance(61 * time.Second)
	s.Observe("other") // the first observation after the period halves the counters
	if est := s.Estimate("k"); est != 50 {
		t.Fatalf("after one period: %d, want 50", est)
	}
	for range 8 {
		clock.advance(61 * time.Second)
		s.Observe("other")
	}
	if est := s.Estimate("k"); est != 0 {
		t.Fatalf("after nine idle periods: %d, want 0", est)
	}
}

func TestConcurrentObserve(t *testing.T) {
	s := New(4096, time.Minute, nil)
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 1000 {
				s.Observe("shared")
			}
		}()
	}
	wg.Wait()
	if est := s.Estimate("shared"); est != 8000 {
		t.Fatalf("estimate %d, want 8000", est)
	}
}

func BenchmarkObserve(b *testing.B) {
	s := New(1<<16, time.Minute, nil)
	keys := make([]string, 1024)
	for i := range keys {
		keys[i] = fmt.Sprintf("httpexample.com/obj/%d", i)
	}
	b.ResetTimer()
	for i := range b.N {
		s.Observe(keys[i&1023])
	}
}

func TestRateFollowsSteadyRate(t *testing.T) {
	clock := &fakeClock{t: time.Unix(0, 0)}
	s := New(1024, 3*time.Second, clock.now)
	var rate float64
	// 5 requests a second (300 a minute) for 30 seconds.
	for range 30 * 5 {
		clock.advance(200 * time.Millisecond)
		rate = s.Rate(s.Observe("k"))
	}
	if rate < 200 || rate > 400 {
		t.Fatalf("estimated %.0f requests a minute, want 300 within a third", rate)
	}
	// Just before and just after a halving, the estimate stays within a third.
	for range 15 {
		clock.advance(200 * time.Millisecond)
		if rate = s.Rate(s.Observe("k")); rate < 200 || rate > 400 {
			t.Fatalf("estimated %.0f requests a minute mid-period, want 300 within a third", rate)
		}
	}
}

// An owned sketch is never halved inside Observe, only by Halve.
func TestOwnedSketchIsHalvedByItsOwnerOnly(t *testing.T) {
	now := time.Unix(1000, 0)
	s := New(1024, time.Second, func() time.Time { return now })
	s.Owned()
	for range 8 {
		s.Observe("k")
	}
	now = now.Add(time.Hour) // many periods later
	if got := s.Observe("k"); got != 9 {
		t.Fatalf("owned sketch after a long wait: %d, want 9 (no halving in Observe)", got)
	}
	s.Halve()
	if got := s.Estimate("k"); got != 4 {
		t.Fatalf("after Halve: %d, want 4", got)
	}
}
