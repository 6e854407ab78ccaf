package flight

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
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
