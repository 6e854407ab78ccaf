package e2e

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// TestPausedNodeIsRoutedAround stops a node with SIGSTOP while clients
// read through the other two, then resumes it: no client gets an error and
// the resumed node returns to the ring. It reports how long the slowest
// answer waited (bounded by the peer hop's health check, not the relay
// timeout).
func TestPausedNodeIsRoutedAround(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c := startCluster(t, ctx, 3, "")
	alive, paused := c.nodes[:2], c.nodes[2]
	var done, failures, slowest atomic.Int64
	var firstErr atomic.Value
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			client := &http.Client{Timeout: time.Minute}
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				start := time.Now()
				if _, err := get(client, alive[i%2], fmt.Sprintf("/obj/p%d?size=1000", (i*4+w)%300), 1000); err != nil {
					failures.Add(1)
					firstErr.CompareAndSwap(nil, err.Error())
				}
				if d := int64(time.Since(start)); d > slowest.Load() {
					slowest.Store(d) // racy max; good enough for a report
				}
				done.Add(1)
			}
		})
	}
	waitCount := func(n int64) {
		if err := eventually(ctx, func() error {
			if got := done.Load(); got < n {
				return fmt.Errorf("%d requests done, want %d", got, n)
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	waitCount(1000)
	if err := paused.proc.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	pausedAt := time.Now()
	for _, nd := range alive {
		c.waitMembers(ctx, nd, 2)
	}
	routedAround := time.Since(pausedAt)
	waitCount(done.Load() + 1000)
	if err := paused.proc.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	resumedAt := time.Now()
	for _, nd := range c.nodes {
		c.waitMembers(ctx, nd, 3)
	}
	back := time.Since(resumedAt)
	waitCount(done.Load() + 1000)
	close(stop)
	wg.Wait()
	t.Logf("%d requests; epoch without the paused node after %s; back in the ring %s after SIGCONT; slowest answer %s",
		done.Load(), routedAround.Round(time.Millisecond), back.Round(time.Millisecond), time.Duration(slowest.Load()).Round(time.Millisecond))
	if n := failures.Load(); n != 0 {
		t.Fatalf("%d of %d requests failed; first: %v", n, done.Load(), firstErr.Load())
	}
}
