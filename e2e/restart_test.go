package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shardcache/shardcache/sdk/ring"
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
		// A drain ends once its peers have been idle for a second; the
		// grace only bounds it, wide so that a loaded machine's slower
		// handoff still completes.
		return []string{"--data-dir", filepath.Join(dirs[i-1], "data"), "--drain-grace", "30s", "--hot-threshold", "-1"}
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

// TestANodeBackInTheRingIsRelayedToAtOnce stops a node without a drain and
// asks another node for its keys, so that the handoffs to it fail and mark
// it down, then starts it again on its data directory. Once
// it is back in the ring it serves its keys to the others at once, from
// its disk: being marked down while it was away does not outlive its
// return.
func TestANodeBackInTheRingIsRelayedToAtOnce(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := t.TempDir()
	c := startClusterWith(t, ctx, clusterConfig{nodes: 3, origin: &countingOrigin{counts: map[string]int{}}, nodeArgs: func(i int) []string {
		return []string{"--data-dir", filepath.Join(dir, fmt.Sprint(i)), "--hot-threshold", "-1"}
	}})
	rg, err := ring.New(1, []ring.Member{{ID: "node-1"}, {ID: "node-2"}, {ID: "node-3"}})
	if err != nil {
		t.Fatal(err)
	}
	var theirs []string
	for k := 0; len(theirs) < 20; k++ {
		if p := fmt.Sprintf("/obj/back%d?size=100", k); rg.Owner("http127.0.0.1"+p).ID == "node-3" {
			theirs = append(theirs, p)
		}
	}
	client := &http.Client{Timeout: 10 * time.Second}
	for _, p := range theirs {
		if _, err := get(client, c.nodes[0], p, 100); err != nil {
			t.Fatal(err)
		}
	}
	back := c.nodes[2]
	if err := back.proc.Stop(30 * time.Second); err != nil { // out of the ring at once: no drain
		t.Fatal(err)
	}
	c.waitMembers(ctx, c.nodes[0], 2)
	for _, p := range theirs { // handoffs to a node that is gone
		if _, err := get(client, c.nodes[0], p+"&away", 100); err != nil {
			t.Fatal(err)
		}
	}
	back.proc = startProcess(t, back.id, filepath.Join(binDir, "shardcache"), back.args...)
	for _, nd := range c.nodes {
		c.waitMembers(ctx, nd, 3)
	}
	for _, p := range theirs {
		resp, err := get(client, c.nodes[0], p, 100)
		if err != nil {
			t.Fatal(err)
		}
		if x, from := resp.Header.Get("X-Cache"), resp.Header.Get("X-Cache-Node"); x != "HIT" || from != back.id {
			t.Fatalf("%s via node-1 after node-3 came back: %s from %s, want a HIT from node-3", p, x, from)
		}
	}
}
