package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/proto"

	pb "github.com/shardcache/shardcache/proto/shardcache/v1"
)

// e2eLease is the member lease the e2e control planes run with.
const e2eLease = 2 * time.Second

// memberKey is where the control plane keeps id's member record.
func memberKey(id string) string { return "/shardcache/members/" + id }

// etcdClient connects to the cluster's etcd.
func (c *cluster) etcdClient(t *testing.T) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{c.etcd}, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// peerOf returns the peer address in id's member record, "" without one.
func peerOf(ctx context.Context, t *testing.T, cli *clientv3.Client, id string) string {
	t.Helper()
	resp, err := cli.Get(ctx, memberKey(id))
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) == 0 {
		return ""
	}
	m := &pb.Member{}
	if err := proto.Unmarshal(resp.Kvs[0].Value, m); err != nil {
		t.Fatal(err)
	}
	return m.GetPeerAddress()
}

// readyz returns nd's /readyz status and text.
func readyz(t *testing.T, nd *node) (int, string) {
	t.Helper()
	resp, err := http.Get("http://" + nd.ops + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestADeletedMemberRecordIsRegisteredAgain deletes a running node's member
// record in etcd, as an operator's mistake or a lost lease would: the node
// learns it is no longer a member, counts it, and registers again with its
// own addresses within one lease.
func TestADeletedMemberRecordIsRegisteredAgain(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := startCluster(t, ctx, 3, "")
	cli := c.etcdClient(t)
	nd := c.nodes[1]
	if got := peerOf(ctx, t, cli, nd.id); got != nd.peer {
		t.Fatalf("%s's record names peer %q, want %s", nd.id, got, nd.peer)
	}
	lost := `cause="record_deleted"`
	before := metric(t, nd, "shardcache_membership_lost_total", lost)
	deleted := time.Now()
	if _, err := cli.Delete(ctx, memberKey(nd.id)); err != nil {
		t.Fatal(err)
	}
	if err := eventually(ctx, func() error {
		if got := peerOf(ctx, t, cli, nd.id); got != nd.peer {
			return fmt.Errorf("record names peer %q", got)
		}
		if n := metric(t, nd, "shardcache_membership_lost_total", lost); n != before+1 {
			return fmt.Errorf("membership lost %v times, want %v", n, before+1)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	back := time.Since(deleted)
	t.Logf("registered again %s after its record was deleted", back.Round(time.Millisecond))
	if back > e2eLease {
		t.Errorf("registered again only after %s, more than the %s lease", back, e2eLease)
	}
	if !strings.Contains(nd.proc.Output(), "membership lost; registering again") {
		t.Error("the node did not log that it lost its membership")
	}
	for _, n := range c.nodes {
		c.waitMembers(ctx, n, 3)
	}
	if code, body := readyz(t, nd); code != 200 {
		t.Fatalf("%s after registering again: /readyz %d %s", nd.id, code, body)
	}
}

// TestASecondProcessWithALiveNodesIDIsRefused starts a process with a live
// node's id (a second pod by mistake, or an old one lingering in a
// restart): the control plane refuses it, says so on both sides and in
// cachectl nodes, and the live node stays a member with its own addresses,
// while the second process runs and after it exits.
func TestASecondProcessWithALiveNodesIDIsRefused(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := startCluster(t, ctx, 3, "")
	cli := c.etcdClient(t)
	live := c.nodes[1]
	dup := &node{id: live.id, client: freeAddr(t), peer: freeAddr(t), ops: freeAddr(t)}
	dup.proc = startProcess(t, "duplicate "+dup.id, filepath.Join(binDir, "shardcache"), "node", "--id", dup.id,
		"--client", dup.client, "--peer", dup.peer, "--ops", dup.ops, "--control-plane", c.control, "--origin", c.originURL,
		"--join-token", "e2e-join", "--drain-grace", "-1s", "--access-log", "off")
	if err := dup.proc.WaitLine(ctx, "the control plane refused this node"); err != nil {
		t.Fatal(err)
	}
	if err := c.controlProc.WaitLine(ctx, "refused a session"); err != nil {
		t.Fatal(err)
	}
	if code, body := readyz(t, dup); code != http.StatusServiceUnavailable || !strings.Contains(body, "refused") {
		t.Fatalf("the refused process's /readyz: %d %s, want 503 naming the refusal", code, body)
	}
	var nodes struct {
		Nodes []struct {
			Member struct {
				ID          string `json:"id"`
				PeerAddress string `json:"peer_address"`
			} `json:"member"`
			InRing      bool `json:"in_ring"`
			LastRefused *struct {
				PeerAddress string `json:"peer_address"`
				Reason      string `json:"reason"`
			} `json:"last_refused"`
		} `json:"nodes"`
	}
	if err := c.cachectl(ctx, &nodes, "nodes"); err != nil {
		t.Fatal(err)
	}
	found := false
	for _, n := range nodes.Nodes {
		if n.Member.ID != live.id {
			continue
		}
		found = true
		if n.Member.PeerAddress != live.peer || !n.InRing {
			t.Errorf("cachectl nodes shows %s at %s (in ring %t), want the live node's %s in the ring", live.id, n.Member.PeerAddress, n.InRing, live.peer)
		}
		if n.LastRefused == nil || n.LastRefused.PeerAddress != dup.peer {
			t.Errorf("cachectl nodes shows the refused attempt as %+v, want one from %s", n.LastRefused, dup.peer)
		}
	}
	if !found {
		t.Fatalf("cachectl nodes lists no %s: %+v", live.id, nodes)
	}

	// The live node keeps its record while the second process retries,
	// and after it has gone for longer than a lease.
	watch := func(d time.Duration) {
		end := time.Now().Add(d)
		for time.Now().Before(end) {
			if got := peerOf(ctx, t, cli, live.id); got != live.peer {
				t.Fatalf("%s's member record names %q, want the live node's %s", live.id, got, live.peer)
			}
			if code, body := readyz(t, live); code != 200 || !strings.Contains(body, "members=3 ") {
				t.Fatalf("the live %s: /readyz %d %s", live.id, code, body)
			}
			time.Sleep(50 * time.Millisecond) // sampling, for d
		}
	}
	watch(e2eLease)
	if err := dup.proc.Stop(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	watch(2 * e2eLease)
	if strings.Contains(live.proc.Output(), "membership lost") {
		t.Fatal("the live node lost its membership")
	}

	// The real node restarted (the same process identity: its id, its
	// addresses) rejoins.
	if err := live.proc.Stop(30 * time.Second); err != nil {
		t.Fatal(err)
	}
	live.proc = startProcess(t, live.id, filepath.Join(binDir, "shardcache"), live.args...)
	for _, nd := range c.nodes {
		c.waitMembers(ctx, nd, 3)
	}
	if got := peerOf(ctx, t, cli, live.id); got != live.peer {
		t.Fatalf("after its restart %s's member record names %q, want %s", live.id, got, live.peer)
	}
}
