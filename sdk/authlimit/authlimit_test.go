package authlimit

import (
	"fmt"
	"testing"
	"time"
)

func TestACallerIsRefusedAfterItsBurstOfFailures(t *testing.T) {
	l := New(time.Second, 3, 100)
	now := time.Unix(1000, 0)
	for i := range 3 {
		if ok, _ := l.Allow("a", now); !ok {
			t.Fatalf("attempt %d refused within the burst", i)
		}
		l.Fail("a", now)
	}
	ok, wait := l.Allow("a", now)
	if ok || wait != time.Second {
		t.Fatalf("after the burst: allowed %v, wait %s; want refused for 1s", ok, wait)
	}
	if ok, _ := l.Allow("b", now); !ok {
		t.Fatal("another caller was refused")
	}
	if ok, _ := l.Allow("a", now.Add(time.Second)); !ok {
		t.Fatal("a second later the caller is still refused")
	}
}

// At the bound, callers with nothing against them make room; when every
// tracked caller has failures, new callers share one bucket and the map
// does not grow.
func TestTheCallersTrackedAreBounded(t *testing.T) {
	l := New(time.Minute, 2, 10)
	now := time.Unix(1000, 0)
	for i := range 10 {
		l.Fail(fmt.Sprint("attacker-", i), now)
	}
	for i := range 1000 {
		c := fmt.Sprint("new-", i)
		l.Fail(c, now)
		l.Fail(c, now)
	}
	if n := l.Tracked(); n != 10 {
		t.Fatalf("tracks %d callers, want the bound of 10", n)
	}
	if ok, _ := l.Allow("new-5000", now); ok {
		t.Fatal("the shared bucket of the callers beyond the bound is not spent")
	}
	// Once the tracked callers' failures are refilled, they make room.
	later := now.Add(10 * time.Minute)
	if ok, _ := l.Allow("fresh", later); !ok {
		t.Fatal("a new caller after the refill was refused")
	}
	if n := l.Tracked(); n != 1 {
		t.Fatalf("after the refill %d callers are tracked, want only the new one", n)
	}
}
