package flight

import (
	"context"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestJoinCollapsesConcurrentCallers(t *testing.T) {
	var g Group[int]
	lead, leader := g.Join("k")
	if !leader {
		t.Fatal("first caller is not the leader")
	}
	const waiters = 50
	var joined, done sync.WaitGroup
	var extraLeaders atomic.Int32
	results := make(chan int, waiters)
	for range waiters {
		joined.Add(1)
		done.Add(1)
		go func() {
			defer done.Done()
			c, leader := g.Join("k")
			joined.Done()
			if leader {
				extraLeaders.Add(1)
				return
			}
			v, ok := c.Wait(context.Background())
			if !ok {
				t.Error("waiter got nothing from a sharing leader")
			}
			results <- v
		}()
	}
	joined.Wait() // every waiter joined before the leader settles
	g.Settle("k", lead, 42, true)
	done.Wait()
	close(results)
	if n := extraLeaders.Load(); n != 0 {
		t.Fatalf("%d callers led their own call while one was in flight", n)
	}
	got := 0
	for v := range results {
		if v != 42 {
			t.Fatalf("result %d, want 42", v)
		}
		got++
	}
	if got != waiters {
		t.Fatalf("%d waiters got a result, want %d", got, waiters)
	}
}

func TestSettleWithoutValueReleasesWaiters(t *testing.T) {
	var g Group[string]
	c, leader := g.Join("k")
	if !leader {
		t.Fatal("first caller is not the leader")
	}
	w, leader2 := g.Join("k")
	if leader2 || w != c {
		t.Fatal("second caller did not join the first call")
	}
	g.Settle("k", c, "", false)
	if _, ok := w.Wait(context.Background()); ok {
		t.Fatal("waiter got a value the leader did not share")
	}
	if _, leader3 := g.Join("k"); !leader3 {
		t.Fatal("a call after Settle did not start anew")
	}
}

func TestWaitHonoursContext(t *testing.T) {
	var g Group[int]
	c, _ := g.Join("k")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, ok := c.Wait(ctx); ok {
		t.Fatal("Wait returned a value after its context ended")
	}
}

func TestSharedValueReachesLateCallersUntilForget(t *testing.T) {
	var g Group[int]
	c, _ := g.Join("k")
	g.Settle("k", c, 7, true)
	late, leader := g.Join("k")
	if leader || late != c {
		t.Fatal("a caller after a shared Settle did not join the call")
	}
	if v, ok := late.Wait(context.Background()); !ok || v != 7 {
		t.Fatalf("late caller got %d, %v; want 7, true", v, ok)
	}
	g.Forget("k", c)
	if _, leader := g.Join("k"); !leader {
		t.Fatal("a call after Forget did not start anew")
	}
}

// TestDoLeadsOnceAndSharesWhatLeadReturns: while the leader's lead runs,
// every other caller of Do waits (counted by Waiting) and gets its value;
// a value lead does not share releases them to fetch alone; a kept one
// reaches late callers until Forget; a lead that panics releases them.
func TestDoLeadsOnceAndSharesWhatLeadReturns(t *testing.T) {
	var g Group[int]
	const waiters = 8
	release := make(chan struct{})
	var leads atomic.Int32
	lead := func(share, keep bool) func(*Call[int]) (int, bool, bool) {
		return func(*Call[int]) (int, bool, bool) {
			leads.Add(1)
			<-release
			return 7, share, keep
		}
	}
	for _, tc := range []struct {
		name        string
		share, keep bool
	}{{"shared", true, false}, {"not shared", false, false}, {"kept", true, true}} {
		leads.Store(0)
		release = make(chan struct{})
		results := make(chan [3]any, waiters+1)
		var wg sync.WaitGroup
		wg.Go(func() {
			v, ok, led := g.Do(context.Background(), time.Minute, tc.name, lead(tc.share, tc.keep))
			results <- [3]any{v, ok, led}
		})
		for leads.Load() == 0 {
			runtime.Gosched() // until the leader runs lead
		}
		for range waiters {
			wg.Go(func() {
				v, ok, led := g.Do(context.Background(), time.Minute, tc.name, lead(tc.share, tc.keep))
				results <- [3]any{v, ok, led}
			})
		}
		for g.Waiting() < waiters {
			runtime.Gosched()
		}
		close(release)
		wg.Wait()
		close(results)
		shared, alone := 0, 0
		for r := range results {
			switch {
			case r[2] == true:
				if r[0] != 7 || r[1] != true {
					t.Errorf("%s: the leader got %v", tc.name, r)
				}
			case r[1] == true && r[0] == 7:
				shared++
			default:
				alone++
			}
		}
		if want := map[bool]int{true: waiters, false: 0}[tc.share]; shared != want || alone != waiters-want {
			t.Errorf("%s: %d waiters shared, %d alone; want %d shared", tc.name, shared, alone, want)
		}
		if g.Waiting() != 0 {
			t.Errorf("%s: %d still counted waiting", tc.name, g.Waiting())
		}
		c, leader := g.Join(tc.name)
		if leader == tc.keep {
			t.Errorf("%s: a late caller leads a new call: %t", tc.name, leader)
		}
		if leader {
			g.Settle(tc.name, c, 0, false)
		} else {
			g.Forget(tc.name, c)
		}
	}

	// A lead that panics settles the call without a value.
	c, _ := g.Join("p")
	done := make(chan bool)
	go func() {
		_, ok := c.Wait(context.Background())
		done <- ok
	}()
	func() {
		defer func() { recover() }()
		g.Lead("p", c, func(*Call[int]) (int, bool, bool) { panic("lead") })
	}()
	if <-done {
		t.Error("a waiter on a panicked lead was given a value")
	}
	if _, leader := g.Join("p"); !leader {
		t.Error("after a panicked lead, the next caller does not lead")
	}
}
