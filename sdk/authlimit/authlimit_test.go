package authlimit

import (
	"context"
	"errors"
	"fmt"
	"runtime"
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

// At the bound, callers with nothing against them make room, else the
// one whose last failure is oldest: a new caller always has a bucket of
// its own, never one that others' failures spent, and the map does not
// grow.
func TestTheCallersTrackedAreBounded(t *testing.T) {
	l := New(time.Minute, 2, 10)
	now := time.Unix(1000, 0)
	for i := range 10 {
		l.Fail(fmt.Sprint("attacker-", i), now)
	}
	for i := range 1000 {
		c := fmt.Sprint("new-", i)
		l.Fail(c, now.Add(time.Duration(i)*time.Millisecond))
		l.Fail(c, now.Add(time.Duration(i)*time.Millisecond))
	}
	if n := l.Tracked(); n != 10 {
		t.Fatalf("tracks %d callers, want the bound of 10", n)
	}
	if ok, _ := l.Allow("new-5000", now.Add(2*time.Second)); !ok {
		t.Fatal("a new caller was refused for the failures of others")
	}
	if ok, _ := l.Allow("new-999", now.Add(2*time.Second)); ok {
		t.Fatal("the newest failing caller was forgotten before older ones")
	}
	later := now.Add(10 * time.Minute)
	if ok, _ := l.Allow("fresh", later); !ok {
		t.Fatal("a new caller after the refill was refused")
	}
	if n := l.Tracked(); n != 1 {
		t.Fatalf("after the refill %d callers are tracked, want only the new one", n)
	}
}

// Check never refuses a right credential because the caller is out of
// failures: it verifies it once the bucket has refilled. A wrong one is
// charged; while one attempt of a throttled caller waits, its others are
// refused unread; another caller is not held up.
func TestCheckThrottlesVerificationNotTheRightCredential(t *testing.T) {
	l := New(50*time.Millisecond, 2, 100)
	ctx := context.Background()
	wrong := func() bool { return false }
	right := func() bool { return true }
	for i := range 2 {
		if err := l.Check(ctx, "a", wrong); !errors.Is(err, ErrWrong) {
			t.Fatalf("wrong credential %d: %v, want ErrWrong", i, err)
		}
	}
	if ok, _ := l.Allow("a", time.Now()); ok {
		t.Fatal("the caller has failures left after its burst")
	}
	started := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- l.Check(ctx, "a", func() bool { close(started); return true })
	}()
	// The throttled caller's attempt waits: a second one meanwhile is refused unread.
	for !l.waitingFor("a") {
		runtime.Gosched()
	}
	second := l.Check(ctx, "a", func() bool { t.Error("a second attempt was verified while one waited"); return true })
	if !errors.Is(second, ErrThrottled) {
		t.Fatalf("a second attempt while one waits: %v, want ErrThrottled", second)
	}
	if err := l.Check(ctx, "b", right); err != nil {
		t.Fatalf("another caller: %v", err)
	}
	if err := <-done; err != nil {
		t.Fatalf("the right credential of a throttled caller: %v, want it to pass", err)
	}
	<-started
	short, cancel := context.WithTimeout(ctx, time.Millisecond)
	defer cancel()
	l.Check(ctx, "c", wrong)
	l.Check(ctx, "c", wrong)
	if err := l.Check(short, "c", right); !errors.Is(err, ErrThrottled) {
		t.Fatalf("a wait longer than the call's deadline: %v, want ErrThrottled", err)
	}
}

func TestKeyGroupsAnIPv6SlashSixtyFour(t *testing.T) {
	if Key("2001:db8::1") != Key("2001:db8::ffff:1") || Key("2001:db8::1") == Key("2001:db8:0:1::1") {
		t.Fatal("IPv6 addresses are not keyed by their /64")
	}
	if Key("192.0.2.1") == Key("192.0.2.2") || Key("::ffff:192.0.2.1") != "192.0.2.1" {
		t.Fatal("IPv4 addresses are not keyed each by itself")
	}
}

// waitingFor reports whether an attempt of caller waits in Check.
func (l *Limiter) waitingFor(caller string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.callers[caller]
	return b != nil && b.waiting
}
