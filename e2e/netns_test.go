package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// netLab runs each process as a host of its own: a network namespace with
// one address, joined to the others by a bridge in the root namespace
// (which only the test's clients use). Faults are routes and queueing
// disciplines inside a namespace.
type netLab struct {
	t      *testing.T
	tag    string
	bridge string
}

// labAddr is the address of host i in the lab.
func labAddr(i int) string { return fmt.Sprintf("10.77.0.%d", i) }

func newNetLab(t *testing.T) *netLab {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("network namespaces need root (CI runs as root)")
	}
	l := &netLab{t: t, tag: fmt.Sprintf("%04d", os.Getpid()%10000)}
	l.bridge = "scbr" + l.tag
	l.ip("link", "add", l.bridge, "type", "bridge")
	t.Cleanup(func() { exec.Command("ip", "link", "del", l.bridge).Run() })
	l.ip("addr", "add", labAddr(254)+"/24", "dev", l.bridge)
	l.ip("link", "set", l.bridge, "up")
	return l
}

func (l *netLab) ip(args ...string) {
	l.t.Helper()
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		l.t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
	}
}

// in runs a command inside host i's namespace.
func (l *netLab) in(i int, args ...string) {
	l.t.Helper()
	l.ip(append([]string{"netns", "exec", l.ns(i)}, args...)...)
}

func (l *netLab) ns(i int) string { return fmt.Sprintf("sc%s-%d", l.tag, i) }

// host creates host i: its namespace, a veth pair to the bridge, its
// address, and a default route through the bridge.
func (l *netLab) host(i int) {
	l.t.Helper()
	ns, hostSide, nsSide := l.ns(i), fmt.Sprintf("sch%s%d", l.tag, i), fmt.Sprintf("scn%s%d", l.tag, i)
	l.ip("netns", "add", ns)
	l.t.Cleanup(func() { exec.Command("ip", "netns", "del", ns).Run() })
	l.ip("link", "add", hostSide, "type", "veth", "peer", "name", nsSide)
	l.ip("link", "set", nsSide, "netns", ns)
	l.ip("link", "set", hostSide, "master", l.bridge)
	l.ip("link", "set", hostSide, "up")
	l.in(i, "ip", "addr", "add", labAddr(i)+"/24", "dev", nsSide)
	l.in(i, "ip", "link", "set", nsSide, "up")
	l.in(i, "ip", "link", "set", "lo", "up")
}

// link is host i's interface, for tc.
func (l *netLab) link(i int) string { return fmt.Sprintf("scn%s%d", l.tag, i) }

// cut makes host i unable to reach host j (a blackhole route); heal undoes it.
func (l *netLab) cut(i, j int)  { l.in(i, "ip", "route", "add", "blackhole", labAddr(j)+"/32") }
func (l *netLab) heal(i, j int) { l.in(i, "ip", "route", "del", "blackhole", labAddr(j)+"/32") }

// start runs bin in host i's namespace.
func (l *netLab) start(i int, name, bin string, args ...string) *process {
	return startProcess(l.t, name, "ip", append([]string{"netns", "exec", l.ns(i), bin}, args...)...)
}

// TestNetworkFaults runs three nodes, the control plane and the origin as
// five hosts, and injects latency and loss, a partition between two
// nodes, a partition of one node from the control plane, and one from the
// origin. Each time the cluster keeps serving with what it has and heals
// without a restart.
func TestNetworkFaults(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	lab := newNetLab(t)
	const control, origin = 1, 2
	for _, h := range []int{control, origin, 11, 12, 13} {
		lab.host(h)
	}
	bin := filepath.Join(binDir, "shardcache")
	lab.start(origin, "origin", bin, "origin", "--listen", labAddr(origin)+":8090")
	// Off loopback the control plane serves TLS: files from
	// shardcache tls-files, verified by the nodes and cachectl.
	tlsDir := filepath.Join(t.TempDir(), "control-tls")
	gen := startProcess(t, "tls-files", bin, "tls-files", "--names", labAddr(control), "--out", tlsDir)
	<-gen.done
	if gen.err != nil {
		t.Fatalf("tls-files: %v %s", gen.err, gen.Output())
	}
	c := &cluster{t: t, token: "e2e-token", control: labAddr(control) + ":7070", controlOps: labAddr(control) + ":9190",
		ca: filepath.Join(tlsDir, "ca.crt")}
	c.controlProc = lab.start(control, "control", bin, "control", "--listen", c.control, "--ops", c.controlOps,
		"--tls-cert", filepath.Join(tlsDir, "tls.crt"), "--tls-key", filepath.Join(tlsDir, "tls.key"),
		"--admin-token", c.token, "--join-token", "e2e-join", "--lease-ttl", "2s", "--epoch-batch-window", "200ms",
		"--etcd-dir", filepath.Join(t.TempDir(), "etcd"), "--etcd-client-url", "http://127.0.0.1:2379", "--etcd-peer-url", "http://127.0.0.1:2380")
	if err := c.controlProc.WaitLine(ctx, "control plane serving"); err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 3; i++ {
		a := labAddr(10 + i)
		nd := &node{id: fmt.Sprintf("node-%d", i), client: a + ":8080", peer: a + ":9080", ops: a + ":9191"}
		nd.args = []string{"node", "--id", nd.id, "--client", nd.client, "--peer", nd.peer, "--ops", nd.ops,
			"--control-plane", c.control, "--control-plane-ca", c.ca, "--origin", "http://" + labAddr(origin) + ":8090", "--join-token", "e2e-join",
			"--drain-grace", "-1s", "--hot-threshold", "-1", "--access-log", "off",
			// An origin cut off mid-request is given up on at the origin
			// timeout (60 s by default, as nginx's proxy_read_timeout).
			"--origin-timeout", "5s",
			// Cut off from the control plane this long, a node revalidates
			// what it stored before the cut (a purge may have missed it).
			"--cut-off-revalidate-after", "3s",
			// The lab's addresses are not loopback: without certificates
			// a node starts only when told its peer hop is unauthenticated.
			"--insecure-peer-hop"}
		nd.proc = lab.start(10+i, nd.id, bin, nd.args...)
		c.nodes = append(c.nodes, nd)
	}
	for _, nd := range c.nodes {
		c.waitMembers(ctx, nd, 3)
		resp, err := http.Get("http://" + nd.ops + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if !strings.Contains(string(b), "peer_hop=insecure") {
			t.Fatalf("%s started with --insecure-peer-hop on %s; /readyz says %q, want peer_hop=insecure", nd.id, nd.peer, b)
		}
		// From another host (the test's, on the bridge), what changes or
		// reads the node's insides needs the admin token.
		for _, path := range []string{"POST /drain", "GET /debug/pprof/", "GET /debug/pprof/cmdline"} {
			method, path, _ := strings.Cut(path, " ")
			req, _ := http.NewRequest(method, "http://"+nd.ops+path, nil)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusUnauthorized {
				t.Fatalf("%s %s from off the node's host without a token: %d, want 401", nd.id, path, resp.StatusCode)
			}
		}
	}
	var nodes struct {
		Nodes []struct {
			Member struct {
				ID      string `json:"id"`
				PeerHop string `json:"peer_hop"`
			} `json:"member"`
		} `json:"nodes"`
	}
	if err := c.cachectl(ctx, &nodes, "nodes"); err != nil {
		t.Fatal(err)
	}
	if len(nodes.Nodes) != 3 {
		t.Fatalf("cachectl nodes lists %d nodes, want 3", len(nodes.Nodes))
	}
	for _, n := range nodes.Nodes {
		if n.Member.PeerHop != "insecure" {
			t.Fatalf("cachectl nodes: %s's peer hop %q, want insecure", n.Member.ID, n.Member.PeerHop)
		}
	}
	originRequests := func() int64 {
		resp, err := http.Get("http://" + labAddr(origin) + ":8090/_stats")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var st struct{ Requests int64 }
		json.NewDecoder(resp.Body).Decode(&st)
		return st.Requests
	}
	const keys, size = 300, 2000
	path := func(k int) string { return fmt.Sprintf("/obj/n%d?size=%d", k, size) }
	client := &http.Client{Timeout: 30 * time.Second}
	// Every request names one virtual host, as behind a load balancer:
	// the nodes' own addresses differ, and the host is part of the key.
	const vhost = "cache.lab"
	get := func(client *http.Client, nd *node, path string, size int) (*http.Response, error) {
		req, err := http.NewRequest(http.MethodGet, "http://"+nd.client+path, nil)
		if err != nil {
			return nil, err
		}
		req.Host = vhost
		resp, err := client.Do(req)
		if err != nil {
			return nil, err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err == nil && (resp.StatusCode != 200 || len(b) != size) {
			err = fmt.Errorf("GET %s via %s: status %d, %d bytes; want 200, %d", path, nd.id, resp.StatusCode, len(b), size)
		}
		return resp, err
	}
	// readAll reads every key through the given nodes, several at a time,
	// and returns how many requests failed and the first error.
	readAll := func(via ...*node) (failed int, first error) {
		var mu sync.Mutex
		var wg sync.WaitGroup
		var next atomic.Int64
		for range 8 {
			wg.Go(func() {
				for {
					k := int(next.Add(1) - 1)
					if k >= keys {
						return
					}
					if _, err := get(client, via[k%len(via)], path(k), size); err != nil {
						mu.Lock()
						failed++
						if first == nil {
							first = err
						}
						mu.Unlock()
					}
				}
			})
		}
		wg.Wait()
		return failed, first
	}
	if n, err := readAll(c.nodes...); n > 0 {
		t.Fatalf("warming: %d failed: %v", n, err)
	}
	// ownedBy returns the first key the node owns in the current ring.
	ownedBy := func(t *testing.T, id string) int {
		var r ringJSON
		if err := c.cachectl(ctx, &r, "ring"); err != nil {
			t.Fatal(err)
		}
		rg := r.ring(t)
		k := 0
		for rg.Owner("http"+vhost+path(k)).ID != id {
			k++
		}
		return k
	}

	t.Run("one node's link slowed", func(t *testing.T) {
		// This machine's kernel has no netem (added delay and loss); a
		// token bucket of 1 Mbit/s makes node-2's link slow and queueing.
		lab.in(12, "tc", "qdisc", "add", "dev", lab.link(12), "root", "tbf", "rate", "1mbit", "burst", "8kb", "latency", "500ms")
		start, o0 := time.Now(), originRequests()
		n, err := readAll(c.nodes...)
		took := time.Since(start)
		lab.in(12, "tc", "qdisc", "del", "dev", lab.link(12), "root")
		t.Logf("node-2's link at 1 Mbit/s: %d keys read in %s, %d failed, %d origin requests", keys, took.Round(time.Millisecond), n, originRequests()-o0)
		if n > 0 {
			t.Fatalf("%d requests failed: %v", n, err)
		}
		if o := originRequests() - o0; o != 0 {
			t.Errorf("%d origin requests for stored keys", o)
		}
	})
	t.Run("two nodes cut from each other", func(t *testing.T) {
		lab.cut(11, 13)
		lab.cut(13, 11)
		o0 := originRequests()
		n, err := readAll(c.nodes[0])
		lab.heal(11, 13)
		lab.heal(13, 11)
		o := originRequests() - o0
		t.Logf("node-1 and node-3 cut apart: %d keys read through node-1, %d failed; %d origin requests (node-3's keys, served by another member)", keys, n, o)
		if n > 0 {
			t.Fatalf("%d requests failed: %v", n, err)
		}
		if o > keys/2 {
			t.Errorf("%d origin requests: more than node-3's keys", o)
		}
		// Healed: node-1 relays to node-3 again (after its breaker's pause).
		healed := time.Now()
		k := ownedBy(t, "node-3")
		if err := eventually(ctx, func() error {
			resp, err := get(client, c.nodes[0], path(k), size)
			if err != nil {
				return err
			}
			if got := resp.Header.Get("X-Cache-Node"); got != "node-3" {
				return fmt.Errorf("served by %s", got)
			}
			return nil
		}); err != nil {
			t.Fatalf("node-1 never relayed to node-3 again: %v", err)
		}
		t.Logf("node-1 relays to node-3 again %s after the cut healed", time.Since(healed).Round(time.Millisecond))
	})
	t.Run("a node cut from the control plane", func(t *testing.T) {
		// A key node-3 owns and stores: purged while node-3 is cut off.
		k := ownedBy(t, "node-3")
		if resp, err := get(client, c.nodes[2], path(k), size); err != nil || resp.Header.Get("X-Cache") != "HIT" {
			t.Fatalf("key %d via its owner node-3 before the cut: %v %v, want a HIT", k, resp.Header.Get("X-Cache"), err)
		}
		lab.cut(13, control)
		cut, o0 := time.Now(), originRequests()
		for _, nd := range c.nodes[:2] {
			c.waitMembers(ctx, nd, 2)
		}
		out := time.Since(cut)
		n, err := readAll(c.nodes...)
		t.Logf("node-3 cut from the control plane: out of the others' ring after %s; %d keys read through all three, %d failed", out.Round(time.Millisecond), keys, n)
		if n > 0 {
			t.Fatalf("%d requests failed: %v", n, err)
		}
		// The purge cannot reach node-3: it is reported unreachable, not
		// forgotten, and the purge is not complete.
		url := "http://" + vhost + path(k)
		st := c.purgeStatus(ctx, "purge", url, "--request-id", "during-cut", "--wait", "1s")
		if st.Complete || len(st.Unreachable) != 1 || st.Unreachable[0].NodeID != "node-3" {
			t.Fatalf("a purge while node-3 is cut off: complete %v, unreachable %v; want node-3 unreachable", st.Complete, st.Unreachable)
		}
		// Past its bound, node-3 does not serve what it stored before the
		// cut without asking the origin.
		waitMetric(ctx, t, c.nodes[2], "shardcache_control_plane_cut_off", 1)
		o1 := originRequests()
		resp, err := get(client, c.nodes[2], path(k), size)
		if err != nil {
			t.Fatal(err)
		}
		if resp.Header.Get("X-Cache") == "HIT" || originRequests() == o1 {
			t.Fatalf("the purged key via cut-off node-3 past its bound: %s with %d origin requests, want it revalidated", resp.Header.Get("X-Cache"), originRequests()-o1)
		}
		t.Logf("node-3 past its 3 s cut-off bound: the purged key answered %s after asking the origin", resp.Header.Get("X-Cache"))
		lab.heal(13, control)
		healed := time.Now()
		for _, nd := range c.nodes {
			c.waitMembers(ctx, nd, 3)
		}
		t.Logf("node-3 back in the ring %s after the cut healed, without a restart; %d origin requests meanwhile", time.Since(healed).Round(time.Millisecond), originRequests()-o0)
		// Back, node-3 applied the purge it missed.
		if st := c.purgeStatus(ctx, "purge", url, "--request-id", "during-cut", "--wait", "30s"); !st.Complete {
			t.Fatalf("after healing: the purge is not complete: pending %v", st.Pending)
		}
		// ... and so fetches the key again (which also stores it again for
		// the next test).
		if resp, err := get(client, c.nodes[2], path(k), size); err != nil || resp.Header.Get("X-Cache") != "MISS" {
			t.Fatalf("the purged key via node-3 after healing: %v %v, want a MISS", resp.Header.Get("X-Cache"), err)
		}
	})
	t.Run("a node cut from the origin", func(t *testing.T) {
		before := originRequests()
		lab.cut(12, origin)
		n, err := readAll(c.nodes...)
		if n > 0 {
			t.Fatalf("stored keys through all three with node-2 cut from the origin: %d failed: %v", n, err)
		}
		var r ringJSON
		if err := c.cachectl(ctx, &r, "ring"); err != nil {
			t.Fatal(err)
		}
		rg := r.ring(t)
		fresh := "/obj/fresh-0?size=10"
		for i := 0; rg.Owner("http"+vhost+fresh).ID != "node-2"; i++ {
			fresh = fmt.Sprintf("/obj/fresh-%d?size=10", i)
		}
		resp, _ := get(client, c.nodes[0], fresh, 10)
		if resp == nil {
			t.Fatal("no answer for a new key of the cut-off owner")
		}
		lab.heal(12, origin)
		t.Logf("node-2 cut from the origin: stored keys all served; a key it owns and has not stored: %d", resp.StatusCode)
		if resp.StatusCode != http.StatusBadGateway && resp.StatusCode != http.StatusGatewayTimeout {
			t.Errorf("a new key of the cut-off owner: %d, want 502 or 504 (it cannot fetch it)", resp.StatusCode)
		}
		if err := eventually(ctx, func() error {
			_, err := get(client, c.nodes[0], fresh, 10)
			return err
		}); err != nil {
			t.Fatalf("after healing: %v", err)
		}
		if got := originRequests() - before; got != 1 {
			t.Errorf("the origin saw %d requests, want 1 (the new key once healed)", got)
		}
	})
}
