package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
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
		return []string{"--data-dir", filepath.Join(dirs[i-1], "data"), "--drain-grace", "10s", "--hot-threshold", "-1"}
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
	load := startLoad(8, 7, paths, 1024, func(rng *rand.Rand) *node {
		if i := rng.IntN(3); inService[i].Load() {
			return nodes[i].Load()
		}
		return nil
	})
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
	load.halt()
	sent, failed := load.sent.Load(), load.failed.Load()
	caused := origin.total.Load() - warm
	t.Logf("rolling restart of 3 nodes under load: %d requests, %d failed, %d origin requests for %d keys (%.1f %%)",
		sent, failed, caused, keys, 100*float64(caused)/keys)
	if failed != 0 {
		t.Errorf("%d of %d requests failed during the restarts; first: %v", failed, sent, load.firstErr.Load())
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
