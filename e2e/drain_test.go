package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestDrainWaitsUntilTheKeysHaveMoved drains a node with cachectl drain
// --wait while clients read every key through the other nodes: once it says
// the node is safe to delete, killing it sends no key to the origin.
func TestDrainWaitsUntilTheKeysHaveMoved(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const keys = 1500
	origin := &countingOrigin{counts: map[string]int{}}
	c := startClusterWith(t, ctx, clusterConfig{nodes: 3, origin: origin, nodeArgs: func(int) []string {
		return []string{"--hot-threshold", "-1"}
	}})
	paths := make([]string, keys)
	for i := range paths {
		paths[i] = fmt.Sprintf("/obj/d%d?size=512", i)
	}
	fetchAll(t, c, paths, 0)
	warm := origin.total.Load()

	load := startLoad(6, 11, paths, 0, func(rng *rand.Rand) *node { return c.nodes[rng.IntN(2)] })
	out, err := exec.CommandContext(ctx, filepath.Join(binDir, "cachectl"), "--control-plane", c.control, "--token", c.token,
		"drain", "node-3", "--wait", "--quiet-for", "6s", "--timeout", "2m").CombinedOutput()
	load.halt()
	if n := load.failed.Load(); n > 0 {
		t.Errorf("%d client requests failed during the drain; first: %v", n, load.firstErr.Load())
	}
	t.Logf("cachectl drain --wait:\n%s", out)
	if err != nil || !strings.Contains(string(out), "safe to delete") || !strings.Contains(string(out), "keys handed off") {
		t.Fatalf("cachectl drain --wait: %v", err)
	}
	c.nodes[2].proc.Kill()
	c.nodes = c.nodes[:2]
	before := origin.total.Load()
	fetchAll(t, c, paths, 0)
	if n := origin.total.Load() - before; n > keys/100 {
		t.Errorf("after the drain and the kill, %d of %d keys went to the origin", n, keys)
	}
	t.Logf("%d origin requests after warming, %d after the drained node was killed", before-warm, origin.total.Load()-before)
}
