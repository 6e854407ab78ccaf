package e2e

import (
	"context"
	"fmt"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestLeaderKilled runs two control-plane replicas on Debian's etcd-server,
// kills the leader with SIGKILL, and checks that the other replica writes
// the next epoch, with epoch numbers strictly increasing and each written once.
func TestLeaderKilled(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	etcd := startEtcd(t, ctx)
	origin := httptest.NewServer(&countingOrigin{counts: map[string]int{}})
	defer origin.Close()

	addrs := []string{freeAddr(t), freeAddr(t)}
	replicas := make([]*process, 2)
	for i, addr := range addrs {
		replicas[i] = startProcess(t, fmt.Sprintf("control-%d", i+1), filepath.Join(binDir, "shardcache"), "control",
			"--listen", addr, "--ops", freeAddr(t), "--replica-id", fmt.Sprintf("cp-%d", i+1), "--etcd-endpoints", etcd.client,
			"--admin-token", "e2e-token", "--lease-ttl", "2s", "--epoch-batch-window", "200ms")
		if err := replicas[i].WaitLine(ctx, "control plane serving"); err != nil {
			t.Fatal(err)
		}
	}
	c := &cluster{t: t, token: "e2e-token", control: addrs[0]}
	startNode := func(id string) *node {
		nd := &node{id: id, client: freeAddr(t), peer: freeAddr(t), ops: freeAddr(t)}
		nd.proc = startProcess(t, id, filepath.Join(binDir, "shardcache"), "node", "--id", id, "--client", nd.client,
			"--peer", nd.peer, "--ops", nd.ops, "--control-plane", strings.Join(addrs, ","), "--origin", origin.URL, "--access-log", "off")
		c.nodes = append(c.nodes, nd)
		return nd
	}
	startNode("node-1")
	startNode("node-2")
	for _, nd := range c.nodes {
		c.waitMembers(ctx, nd, 2)
	}

	leader, survivor := -1, -1
	for i, r := range replicas {
		if strings.Contains(r.Output(), "elected leader") {
			leader, survivor = i, 1-i
		}
	}
	if leader < 0 {
		t.Fatal("no replica says it was elected leader")
	}
	replicas[leader].Kill()
	killed := time.Now()
	c.control = addrs[survivor]

	startNode("node-3")
	for _, n := range c.nodes {
		c.waitMembers(ctx, n, 3)
	}
	t.Logf("after SIGKILL of the leader, the next epoch reached every node in %s (lease TTL 2s)", time.Since(killed).Round(time.Millisecond))

	// Every epoch from 1 to the current one exists, each after the one
	// before it, written once (a second write would have a new created time
	// and break the chain of previous epochs).
	var cur ringJSON
	if err := c.cachectl(ctx, &cur, "ring"); err != nil {
		t.Fatal(err)
	}
	last := cur.Epoch
	if last < 2 {
		t.Fatalf("current epoch %d, want at least 2", last)
	}
	var prevCreated time.Time
	for n := uint64(1); n <= last; n++ {
		var e struct {
			Epoch         uint64    `json:"epoch"`
			PreviousEpoch uint64    `json:"previous_epoch"`
			CreatedAt     time.Time `json:"created_at"`
		}
		if err := c.cachectl(ctx, &e, "ring", "--epoch", strconv.FormatUint(n, 10)); err != nil {
			t.Fatal(err)
		}
		if e.Epoch != n || e.PreviousEpoch != n-1 || !e.CreatedAt.After(prevCreated) {
			t.Fatalf("epoch %d: %+v does not follow epoch %d created %s", n, e, n-1, prevCreated)
		}
		prevCreated = e.CreatedAt
	}
}
