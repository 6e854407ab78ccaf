package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shardcache/shardcache/sdk/ring"
)

var binDir string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "shardcache-e2e-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binDir = dir
	// Dev clusters write their admin token files under XDG_RUNTIME_DIR
	// (devtoken.Path), else in the user's config directory: the tests'
	// go to a directory of the run's own (a test may name another), not
	// into the home of whoever runs them, where a killed cluster's file
	// would stay.
	runtime := filepath.Join(dir, "run")
	if err := os.Mkdir(runtime, 0o700); err == nil {
		err = os.Setenv("XDG_RUNTIME_DIR", runtime)
	}
	if err == nil {
		err = buildBinaries(dir)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// countingOrigin serves /obj/<id> like the demo origin and counts requests
// per path.
type countingOrigin struct {
	mu     sync.Mutex
	counts map[string]int
	total  atomic.Int64
}

func (o *countingOrigin) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	o.mu.Lock()
	o.counts[r.URL.Path]++
	o.mu.Unlock()
	o.total.Add(1)
	size, _ := strconv.Atoi(r.URL.Query().Get("size"))
	w.Header().Set("Cache-Control", "public, max-age=3600")
	w.Header().Set("Content-Length", strconv.Itoa(size))
	io.WriteString(w, strings.Repeat("x", size))
}

func (o *countingOrigin) count(path string) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.counts[path]
}

// node is a started node process and its addresses.
type node struct {
	id                string
	client, peer, ops string
	proc              *process
	args              []string // to start it again
}

type cluster struct {
	t           *testing.T
	token       string
	control     string
	controlProc *process
	controlOps  string // its /metrics
	origin      *countingOrigin
	originURL   string
	nodeArgs    func(i int) []string
	nodes       []*node
	etcd        string // the client URL of the control plane's etcd
	ca          string // the CA of the control plane's TLS, when it serves TLS
}

// startCluster starts a control plane, n nodes and an origin, and waits
// until every node serves with an epoch of all n. The control plane uses the
// etcd at etcdURL, or an embedded one when it is empty.
func startCluster(t *testing.T, ctx context.Context, n int, etcdURL string) *cluster {
	t.Helper()
	origin := &countingOrigin{counts: map[string]int{}}
	c := startClusterWith(t, ctx, clusterConfig{nodes: n, etcdURL: etcdURL, origin: origin})
	c.origin = origin
	return c
}

// clusterConfig varies startClusterWith's cluster.
type clusterConfig struct {
	nodes   int
	etcdURL string
	origin  http.Handler
	// nodeArgs, when set, adds flags to node i (from 1).
	nodeArgs func(i int) []string
}

// startClusterWith starts a control plane, cfg.nodes nodes and cfg.origin.
func startClusterWith(t *testing.T, ctx context.Context, cfg clusterConfig) *cluster {
	t.Helper()
	n, etcdURL := cfg.nodes, cfg.etcdURL
	osrv := httptest.NewServer(cfg.origin)
	t.Cleanup(osrv.Close)

	c := &cluster{t: t, token: "e2e-token", control: freeAddr(t)}
	c.controlOps = freeAddr(t)
	args := []string{"control", "--listen", c.control, "--ops", c.controlOps, "--admin-token", c.token, "--join-token", "e2e-join",
		"--lease-ttl", "2s", "--epoch-batch-window", "200ms"}
	if etcdURL != "" {
		args = append(args, "--etcd-endpoints", etcdURL)
		c.etcd = etcdURL
	} else {
		c.etcd = "http://" + freeAddr(t)
		args = append(args, "--etcd-dir", filepath.Join(t.TempDir(), "etcd"),
			"--etcd-client-url", c.etcd, "--etcd-peer-url", "http://"+freeAddr(t))
	}
	c.controlProc = startProcess(t, "control", filepath.Join(binDir, "shardcache"), args...)
	if err := c.controlProc.WaitLine(ctx, "control plane serving"); err != nil {
		t.Fatal(err)
	}
	c.originURL, c.nodeArgs = osrv.URL, cfg.nodeArgs
	for range n {
		c.addNode()
	}
	for _, nd := range c.nodes {
		c.waitMembers(ctx, nd, n)
	}
	return c
}

// addNode starts node-<len(nodes)+1> and adds it to c.nodes.
func (c *cluster) addNode() *node {
	i := len(c.nodes) + 1
	t := c.t
	nd := &node{id: fmt.Sprintf("node-%d", i), client: freeAddr(t), peer: freeAddr(t), ops: freeAddr(t)}
	nd.args = []string{"node", "--id", nd.id, "--client", nd.client, "--peer", nd.peer, "--ops", nd.ops,
		"--control-plane", c.control, "--origin", c.originURL, "--join-token", "e2e-join", "--admin-token", c.token,
		"--drain-grace", "-1s", // a test's nodes stop together at its end, unless nodeArgs say otherwise
		"--access-log", "off"} // unless nodeArgs ask for it: a test that reads no access log need not carry it
	if c.nodeArgs != nil {
		nd.args = append(nd.args, c.nodeArgs(i)...)
	}
	nd.proc = startProcess(t, nd.id, filepath.Join(binDir, "shardcache"), nd.args...)
	c.nodes = append(c.nodes, nd)
	return nd
}

// waitMembers waits until nd's /readyz reports an epoch of want members.
func (c *cluster) waitMembers(ctx context.Context, nd *node, want int) {
	c.t.Helper()
	if err := waitReadyz(ctx, nd, fmt.Sprintf("members=%d ", want)); err != nil {
		c.t.Fatal(err)
	}
}

// waitReadyz waits until nd's /readyz answers 200 with a text holding want.
func waitReadyz(ctx context.Context, nd *node, want string) error {
	return eventually(ctx, func() error {
		resp, err := http.Get("http://" + nd.ops + "/readyz")
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 || !strings.Contains(string(b), want) {
			return fmt.Errorf("%s /readyz: %d %s", nd.id, resp.StatusCode, b)
		}
		return nil
	})
}

// cachectl runs the real CLI with -o json and decodes its output.
func (c *cluster) cachectl(ctx context.Context, out any, args ...string) error {
	args = append(append(c.controlArgs(), "-o", "json"), args...)
	cmd := exec.CommandContext(ctx, filepath.Join(binDir, "cachectl"), args...)
	b, err := cmd.Output()
	if err != nil {
		var stderr string
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = string(ee.Stderr)
		}
		return fmt.Errorf("cachectl %v: %v: %s", args, err, stderr)
	}
	return json.Unmarshal(b, out)
}

// cachectlText runs the real CLI for its effect; the error carries its output.
func (c *cluster) cachectlText(ctx context.Context, args ...string) error {
	args = append(c.controlArgs(), args...)
	out, err := exec.CommandContext(ctx, filepath.Join(binDir, "cachectl"), args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("cachectl %v: %v: %s", args, err, out)
	}
	return nil
}

// controlArgs are cachectl's flags to reach c's control plane.
func (c *cluster) controlArgs() []string {
	args := []string{"--control-plane", c.control, "--token", c.token}
	if c.ca != "" {
		args = append(args, "--ca", c.ca)
	}
	return args
}

// ringJSON is the part of `cachectl ring -o json` the tests read.
type ringJSON struct {
	Epoch   uint64 `json:"epoch"`
	Members []struct {
		ID string `json:"id"`
	} `json:"members"`
}

func (r ringJSON) ring(t *testing.T) *ring.Ring {
	t.Helper()
	members := make([]ring.Member, 0, len(r.Members))
	for _, m := range r.Members {
		members = append(members, ring.Member{ID: m.ID})
	}
	rg, err := ring.New(r.Epoch, members)
	if err != nil {
		t.Fatal(err)
	}
	return rg
}

// get fetches path through nd and checks the body length.
func get(client *http.Client, nd *node, path string, size int) (*http.Response, error) {
	resp, err := client.Get("http://" + nd.client + path)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != 200 || len(b) != size {
		return nil, fmt.Errorf("GET %s via %s: status %d, %d bytes; want 200, %d", path, nd.id, resp.StatusCode, len(b), size)
	}
	return resp, nil
}

// metric sums the samples of a Prometheus counter whose labels contain
// every given label pair.
func metric(t *testing.T, nd *node, name string, labels ...string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + nd.ops + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var sum float64
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name+"{") && !strings.HasPrefix(line, name+" ") {
			continue
		}
		ok := true
		for _, l := range labels {
			if !strings.Contains(line, l) {
				ok = false
			}
		}
		if !ok {
			continue
		}
		f := strings.Fields(line)
		v, _ := strconv.ParseFloat(f[len(f)-1], 64)
		sum += v
	}
	return sum
}

func TestClusterServesEveryKeyOnceAndSurvivesANodeKill(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c := startCluster(t, ctx, 3, "")

	var rj ringJSON
	if err := c.cachectl(ctx, &rj, "ring"); err != nil {
		t.Fatal(err)
	}
	if len(rj.Members) != 3 {
		t.Fatalf("cachectl ring lists %d members, want 3", len(rj.Members))
	}
	rg := rj.ring(t)

	const keys, size = 1000, 512
	path := func(k int) string { return fmt.Sprintf("/obj/%d?size=%d", k, size) }
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 16}}

	// Every key through every node; workers spread keys, each key's three
	// requests run in turn.
	var wantRelayed atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, keys)
	work := make(chan int)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := range work {
				owner := rg.Owner("http127.0.0.1" + path(k)).ID
				for _, nd := range c.nodes {
					resp, err := get(client, nd, path(k), size)
					if err != nil {
						errs <- err
						continue
					}
					if got := resp.Header.Get("X-Cache-Node"); got != owner {
						errs <- fmt.Errorf("key %d via %s served by %q, ring says owner %s", k, nd.id, got, owner)
					}
					if nd.id != owner {
						wantRelayed.Add(1)
					}
				}
			}
		}()
	}
	for k := range keys {
		work <- k
	}
	close(work)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if t.Failed() {
		t.FailNow()
	}
	for k := range keys {
		if n := c.origin.count(fmt.Sprintf("/obj/%d", k)); n != 1 {
			t.Errorf("key %d reached the origin %d times, want exactly 1", k, n)
		}
	}

	var relayed, handoffs, lists, opened, reused float64
	for _, nd := range c.nodes {
		relayed += metric(t, nd, "shardcache_requests_total", `route="relayed"`)
		handoffs += metric(t, nd, "shardcache_handoff_requests_total")
		lists += metric(t, nd, "shardcache_hot_key_events_total", `event="list_asked"`)
		opened += metric(t, nd, "shardcache_peer_connections_total", `state="opened"`)
		reused += metric(t, nd, "shardcache_peer_connections_total", `state="reused"`)
	}
	if int64(relayed) != wantRelayed.Load() {
		t.Errorf("nodes counted %v relayed requests; %d requests went through a non-owner", relayed, wantRelayed.Load())
	}
	// One pooled HTTP/2 connection per peer pair carries the relay: 3 nodes
	// have 6 ordered pairs. A little slack covers a dial racing the first
	// concurrent requests.
	// A node whose first epoch is one that adds it asks its keys' previous
	// owners first (handoff), and after each ring change every node asks
	// its peers for their hot keys (pre-copy): those requests take the hop
	// too.
	if opened > 12 || opened+reused != relayed+handoffs+lists {
		t.Errorf("peer connections: %v opened, %v reused for %v relayed requests, %v handoffs and %v hot-key lists", opened, reused, relayed, handoffs, lists)
	}
	t.Logf("%d requests, %v relayed over %v peer connections opened (%v reuses)", keys*3, relayed, opened, reused)

	// Kill one node: a new epoch without it must reach the others, and every
	// key must still be served; keys whose owner survived stay where they were.
	dead := c.nodes[2]
	dead.proc.Kill()
	killedAt := time.Now()
	alive := c.nodes[:2]
	for _, nd := range alive {
		c.waitMembers(ctx, nd, 2)
	}
	t.Logf("epoch without %s reached the other nodes %s after the kill", dead.id, time.Since(killedAt).Round(time.Millisecond))
	if err := c.cachectl(ctx, &rj, "ring"); err != nil {
		t.Fatal(err)
	}
	for _, m := range rj.Members {
		if m.ID == dead.id {
			t.Fatalf("killed node %s is still in the ring", dead.id)
		}
	}
	before := map[int]int{}
	for k := range keys {
		before[k] = c.origin.count(fmt.Sprintf("/obj/%d", k))
	}
	for k := range keys {
		for _, nd := range alive {
			if _, err := get(client, nd, path(k), size); err != nil {
				t.Fatal(err)
			}
		}
	}
	moved := 0
	for k := range keys {
		extra := c.origin.count(fmt.Sprintf("/obj/%d", k)) - before[k]
		wasDead := rg.Owner("http127.0.0.1"+path(k)).ID == dead.id
		switch {
		case wasDead && extra != 1:
			t.Errorf("key %d of the killed node reached the origin %d more times, want 1", k, extra)
		case !wasDead && extra != 0:
			t.Errorf("key %d whose owner survived reached the origin again (%d times)", k, extra)
		}
		if wasDead {
			moved++
		}
	}
	t.Logf("%d of %d keys moved with the killed node (ideal 1/3)", moved, keys)
}

// TestOwnerKilledUnderLoad SIGKILLs a node while clients keep requesting
// keys through the other two: no client gets an error, before, during or
// after the new epoch.
func TestOwnerKilledUnderLoad(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c := startCluster(t, ctx, 3, "")
	alive, dead := c.nodes[:2], c.nodes[2]
	var done atomic.Int64
	var failures atomic.Int64
	var firstErr atomic.Value
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			client := &http.Client{}
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				k := (i*4 + w) % 300
				if _, err := get(client, alive[i%2], fmt.Sprintf("/obj/%d?size=1000", k), 1000); err != nil {
					failures.Add(1)
					firstErr.CompareAndSwap(nil, err.Error())
				}
				done.Add(1)
			}
		})
	}
	waitCount := func(n int64) {
		err := eventually(ctx, func() error {
			if got := done.Load(); got < n {
				return fmt.Errorf("%d requests done, want %d", got, n)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	waitCount(1000)
	dead.proc.Kill()
	killedAt := done.Load()
	for _, nd := range alive {
		c.waitMembers(ctx, nd, 2)
	}
	waitCount(done.Load() + 1000)
	close(stop)
	wg.Wait()
	if n := failures.Load(); n != 0 {
		t.Fatalf("%d of %d requests failed after %s was killed at request %d; first: %v", n, done.Load(), dead.id, killedAt, firstErr.Load())
	}
	t.Logf("%d requests, %s killed at request %d, no client errors", done.Load(), dead.id, killedAt)
}

// purgeStatus runs cachectl with args (a purge) and returns the status it
// prints, whether or not every node acknowledged (it exits non-zero when
// some did not).
func (c *cluster) purgeStatus(ctx context.Context, args ...string) purgeJSON {
	c.t.Helper()
	args = append(append(c.controlArgs(), "-o", "json"), args...)
	cmd := exec.CommandContext(ctx, filepath.Join(binDir, "cachectl"), args...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	b, _ := cmd.Output()
	var st purgeJSON
	if err := json.Unmarshal(b, &st); err != nil {
		c.t.Fatalf("cachectl %v printed no status (%v): %s%s", args, err, b, stderr.String())
	}
	return st
}

// waitMetric waits until nd's metric name has value want.
func waitMetric(ctx context.Context, t *testing.T, nd *node, name string, want float64) {
	t.Helper()
	if err := eventually(ctx, func() error {
		if got := metric(t, nd, name); got != want {
			return fmt.Errorf("%s of %s is %v, want %v", name, nd.id, got, want)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}
