package e2e

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestRollingRestartUnderLoad restarts every node in turn, on its data
// directory, while clients keep reading: as Kubernetes does, a node leaves
// the client Service before it is stopped and returns once ready. No
// request may fail, and the restarts may send few keys to the origin: a
// stopping node drains (its peers take its keys by handoff) and a
// restarted one finds its own keys on disk.
func TestRollingRestartUnderLoad(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	const keys = 2000
	origin := &countingOrigin{counts: map[string]int{}}
	dirs := []string{t.TempDir(), t.TempDir(), t.TempDir()}
	c := startClusterWith(t, ctx, clusterConfig{nodes: 3, origin: origin, nodeArgs: func(i int) []string {
		return []string{"--data-dir", filepath.Join(dirs[i-1], "data"), "--drain-grace", "10s", "--hot-threshold", "-1", "--access-log", "off"}
	}})
	paths := make([]string, keys)
	for i := range paths {
		paths[i] = fmt.Sprintf("/obj/r%d?size=1024", i)
	}
	fetchAll(t, c, paths, 0)
	warm := origin.total.Load()

	var inService [3]atomic.Bool
	var nodes [3]atomic.Pointer[node]
	for i := range 3 {
		inService[i].Store(true)
		nodes[i].Store(c.nodes[i])
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var sent, failed atomic.Int64
	var firstErr atomic.Value
	for w := range 8 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			client := &http.Client{Timeout: 30 * time.Second}
			for {
				select {
				case <-stop:
					return
				default:
				}
				i := rng.IntN(3)
				if !inService[i].Load() {
					continue
				}
				resp, err := client.Get("http://" + nodes[i].Load().client + paths[rng.IntN(keys)])
				sent.Add(1)
				if err == nil {
					var n int64
					n, err = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if err == nil && (resp.StatusCode != 200 || n != 1024) {
						err = fmt.Errorf("%d with %d bytes", resp.StatusCode, n)
					}
				}
				if err != nil {
					failed.Add(1)
					firstErr.CompareAndSwap(nil, err)
				}
			}
		})
	}
	for i, nd := range c.nodes {
		inService[i].Store(false) // out of the client Service first, as at a pod's termination
		if err := nd.proc.Stop(30 * time.Second); err != nil {
			t.Fatalf("stopping %s: %v", nd.id, err)
		}
		nd.proc = startProcess(t, nd.id, filepath.Join(binDir, "shardcache"), nd.args...)
		for _, other := range c.nodes {
			c.waitMembers(ctx, other, 3)
		}
		inService[i].Store(true)
	}
	close(stop)
	wg.Wait()
	caused := origin.total.Load() - warm
	t.Logf("rolling restart of 3 nodes under load: %d requests, %d failed, %d origin requests for %d keys (%.1f %%)",
		sent.Load(), failed.Load(), caused, keys, 100*float64(caused)/keys)
	if failed.Load() != 0 {
		t.Errorf("%d of %d requests failed during the restarts; first: %v", failed.Load(), sent.Load(), firstErr.Load())
	}
	if caused >= keys*5/100 {
		t.Errorf("the restarts sent %d of %d keys to the origin, want under 5 %%", caused, keys)
	}
	// Every node came back with its keys: everything is a hit.
	before := origin.total.Load()
	for i, x := range fetchAll(t, c, paths, 1) {
		if x != "HIT" {
			t.Fatalf("%s after the restarts: X-Cache %q", paths[i], x)
		}
	}
	if n := origin.total.Load() - before; n != 0 {
		t.Errorf("%d origin requests after the restarts", n)
	}
}
