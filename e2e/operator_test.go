package e2e

import (
	"context"
	"io"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/shardcache/shardcache/sdk/ring"
)

// inspectJSON is the part of `cachectl inspect -o json` the tests read.
type inspectJSON struct {
	Key    string   `json:"key"`
	Owners []string `json:"owners"`
	Stored bool     `json:"stored"`
	Nodes  []struct {
		Node        string `json:"node"`
		Owner       bool   `json:"owner"`
		Unreachable string `json:"unreachable"`
		Objects     []struct {
			Kind      string `json:"kind"`
			Tier      string `json:"tier"`
			Size      int64  `json:"size"`
			FreshFor  int64  `json:"fresh_for_seconds"`
			Freshness string `json:"freshness"`
		} `json:"objects"`
	} `json:"nodes"`
}

// statsJSON is the part of `cachectl stats -o json` the tests read.
type statsJSON struct {
	Nodes []struct {
		Node        string `json:"node"`
		Live        bool   `json:"live"`
		Unreachable string `json:"unreachable"`
		Requests    uint64 `json:"requests"`
	} `json:"nodes"`
	Total struct {
		Requests uint64 `json:"requests"`
	} `json:"total"`
}

// TestCachectlInspectAndLiveStats: `cachectl stats` right after traffic
// counts all of it (live counters, not a load report seconds old);
// `cachectl inspect` shows a stored object's tier and freshness on its
// owner and on a node holding a hot copy, and says "not stored" for a URL
// no node holds; a node that is down is shown unreachable, and both keep
// going.
func TestCachectlInspectAndLiveStats(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := startClusterWith(t, ctx, clusterConfig{nodes: 3, origin: &countingOrigin{counts: map[string]int{}}, nodeArgs: func(int) []string {
		return []string{"--hot-threshold", "5"}
	}})
	rg, err := ring.New(1, []ring.Member{{ID: "node-1"}, {ID: "node-2"}, {ID: "node-3"}})
	if err != nil {
		t.Fatal(err)
	}
	path := "/ins/a?size=100"
	// A hot key has two owners (replication factor 2); the third node
	// keeps a hot copy.
	owners := rg.AppendOwners(nil, "http127.0.0.1"+path, 2)
	owner := owners[0].ID
	var front *node
	for _, nd := range c.nodes {
		if nd.id != owners[0].ID && nd.id != owners[1].ID {
			front = nd
		}
	}
	client := &http.Client{Timeout: 10 * time.Second}
	sent := 0
	for range 30 { // hot at the front: it keeps a copy
		resp, err := client.Get("http://" + front.client + path)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		sent++
	}

	var st statsJSON
	if err := c.cachectl(ctx, &st, "stats"); err != nil {
		t.Fatal(err)
	}
	if st.Total.Requests != uint64(sent) {
		t.Fatalf("cachectl stats right after %d requests counts %d", sent, st.Total.Requests)
	}
	for _, n := range st.Nodes {
		if !n.Live {
			t.Errorf("%s: not live (%s)", n.Node, n.Unreachable)
		}
	}

	var in inspectJSON
	if err := c.cachectl(ctx, &in, "inspect", "http://127.0.0.1"+path); err != nil {
		t.Fatal(err)
	}
	if !in.Stored || len(in.Owners) == 0 || in.Owners[0] != owner {
		t.Fatalf("inspect: stored %t, owners %v; want stored, %s first", in.Stored, in.Owners, owner)
	}
	kinds := map[string]string{}
	for _, n := range in.Nodes {
		for _, o := range n.Objects {
			if o.Size != 100 || o.FreshFor <= 0 || o.FreshFor > 3600 || !strings.Contains(o.Freshness, "max-age=3600") || o.Tier != "memory" {
				t.Errorf("%s holds %+v; want 100 bytes in memory, fresh for up to an hour by max-age=3600", n.Node, o)
			}
			kinds[n.Node] = o.Kind
		}
	}
	if kinds[owner] != "response" || kinds[front.id] != "hot copy" {
		t.Fatalf("inspect found %v; want the response on %s and a hot copy on %s", kinds, owner, front.id)
	}

	// A URL no node stores, and a node that is down.
	down := c.nodes[2]
	down.proc.Kill()
	args := []string{"--control-plane", c.control, "--token", c.token, "inspect", "http://127.0.0.1/ins/never"}
	out, err := exec.CommandContext(ctx, filepath.Join(binDir, "cachectl"), args...).CombinedOutput()
	if err != nil {
		t.Fatalf("cachectl inspect with a node down: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "not stored") || !strings.Contains(string(out), "unreachable") {
		t.Fatalf("cachectl inspect of a URL no node holds, %s down:\n%s\nwant \"not stored\" and %s unreachable", down.id, out, down.id)
	}
	t.Logf("cachectl inspect, a node down:\n%s", out)
	if err := c.cachectl(ctx, &st, "stats"); err != nil {
		t.Fatal(err)
	}
	for _, n := range st.Nodes {
		if n.Node == down.id && (n.Live || n.Unreachable == "") {
			t.Errorf("%s, down: live %t, unreachable %q; want it marked unreachable", n.Node, n.Live, n.Unreachable)
		}
	}
}
