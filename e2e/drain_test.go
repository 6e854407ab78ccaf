package e2e

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
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

// TestDrainedByPreStopCanBeUndrained drains a node the way its pod's
// preStop hook does (shardcache drain): it leaves the ring but keeps its
// session, so cachectl shows it draining and cachectl undrain gives the
// running node its keys back. A node that drained itself and then stopped
// comes back owning keys: the drain was its process's own.
func TestDrainedByPreStopCanBeUndrained(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := startCluster(t, ctx, 3, "")
	shardcache := filepath.Join(binDir, "shardcache")
	drain := func(nd *node) {
		t.Helper()
		out, err := exec.CommandContext(ctx, shardcache, "drain", "--ops", nd.ops, "--admin-token", c.token, "--timeout", "1m").CombinedOutput()
		if err != nil || !strings.Contains(string(out), "drained") {
			t.Fatalf("shardcache drain %s: %v\n%s", nd.id, err, out)
		}
	}
	third := c.nodes[2]
	drain(third)
	for _, nd := range c.nodes[:2] {
		c.waitMembers(ctx, nd, 2)
	}
	if err := waitNotReady(ctx, third, "draining"); err != nil {
		t.Fatal(err)
	}
	var nodes struct {
		Nodes []struct {
			Member struct{ ID, State string } `json:"member"`
			InRing bool                       `json:"in_ring"`
		} `json:"nodes"`
	}
	if err := c.cachectl(ctx, &nodes, "nodes"); err != nil {
		t.Fatal(err)
	}
	found := false
	for _, n := range nodes.Nodes {
		if n.Member.ID == third.id {
			found = true
			if n.Member.State != "MEMBER_STATE_DRAINING" || n.InRing {
				t.Fatalf("cachectl nodes: %s is %s, in ring %t; want draining, out of the ring", third.id, n.Member.State, n.InRing)
			}
		}
	}
	if !found {
		t.Fatalf("cachectl nodes does not list %s after its drain: %+v", third.id, nodes)
	}
	if err := c.cachectlText(ctx, "undrain", third.id); err != nil {
		t.Fatal(err)
	}
	for _, nd := range c.nodes {
		c.waitMembers(ctx, nd, 3) // the undrained node serves as a member again
	}

	// Drained by itself, then stopped: back in the ring when it starts.
	second := c.nodes[1]
	drain(second)
	c.waitMembers(ctx, c.nodes[0], 2)
	if err := second.proc.Stop(30 * time.Second); err != nil {
		t.Fatal(err)
	}
	second.proc = startProcess(t, second.id, shardcache, second.args...)
	for _, nd := range c.nodes {
		c.waitMembers(ctx, nd, 3)
	}
}

// waitNotReady waits until nd's /readyz answers 503 with a text holding want.
func waitNotReady(ctx context.Context, nd *node, want string) error {
	return eventually(ctx, func() error {
		code, body := readyzOf(nd)
		if code != http.StatusServiceUnavailable || !strings.Contains(body, want) {
			return fmt.Errorf("%s /readyz: %d %s, want 503 %q", nd.id, code, body, want)
		}
		return nil
	})
}

func readyzOf(nd *node) (int, string) {
	resp, err := http.Get("http://" + nd.ops + "/readyz")
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}
