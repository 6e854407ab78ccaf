package e2e

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
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

// TestCachectlTopInTmux runs `cachectl top` in a tmux terminal against a
// cluster under load: the screen has every node's row with requests per
// second above zero; a key press sorts by node name; q exits 0.
func TestCachectlTopInTmux(t *testing.T) {
	if _, err := exec.LookPath("tmux"); err != nil {
		t.Fatalf("tmux: %v (e2e/install-deps.sh installs it)", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := startClusterWith(t, ctx, clusterConfig{nodes: 3, origin: &countingOrigin{counts: map[string]int{}}})
	load := startLoad(4, 1, []string{"/top/a?size=100", "/top/b?size=100", "/top/c?size=100", "/top/d?size=100"}, 100, func(rng *rand.Rand) *node {
		return c.nodes[rng.IntN(3)]
	})
	defer load.halt()

	// A tmux server of the test's own (its own socket), killed by that
	// socket at the end.
	sock := filepath.Join(t.TempDir(), "tmux.sock")
	tmux := func(args ...string) (string, error) {
		out, err := exec.CommandContext(ctx, "tmux", append([]string{"-S", sock}, args...)...).CombinedOutput()
		return string(out), err
	}
	exitFile := filepath.Join(t.TempDir(), "exit")
	cmd := fmt.Sprintf("%s --control-plane %s --token %s top --interval 500ms; echo $? > %s",
		filepath.Join(binDir, "cachectl"), c.control, c.token, exitFile)
	if out, err := tmux("new-session", "-d", "-s", "top", "-x", "160", "-y", "40", cmd); err != nil {
		t.Fatalf("tmux new-session: %v\n%s", err, out)
	}
	t.Cleanup(func() { tmux("kill-server") })
	rows := regexp.MustCompile(`(?m)^(node-\d)\s+(\d+)\s`)
	screen := func() (string, error) { return tmux("capture-pane", "-p", "-t", "top") }
	var order []string
	err := eventually(ctx, func() error {
		s, err := screen()
		if err != nil {
			return fmt.Errorf("capture-pane: %v: %s", err, s)
		}
		order = order[:0]
		for _, m := range rows.FindAllStringSubmatch(s, -1) {
			if m[2] == "0" {
				return fmt.Errorf("%s shows 0 req/s:\n%s", m[1], s)
			}
			order = append(order, m[1])
		}
		if len(order) != 3 {
			return fmt.Errorf("%d node rows on screen:\n%s", len(order), s)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if out, err := tmux("send-keys", "-t", "top", "n"); err != nil {
		t.Fatalf("send-keys: %v %s", err, out)
	}
	err = eventually(ctx, func() error {
		s, _ := screen()
		got := rows.FindAllStringSubmatch(s, -1)
		if len(got) != 3 || got[0][1] != "node-1" || got[1][1] != "node-2" || got[2][1] != "node-3" {
			return fmt.Errorf("after n, the rows are not by node name:\n%s", s)
		}
		t.Logf("cachectl top, sorted by node:\n%s", s)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if out, err := tmux("send-keys", "-t", "top", "q"); err != nil {
		t.Fatalf("send-keys: %v %s", err, out)
	}
	err = eventually(ctx, func() error {
		b, err := os.ReadFile(exitFile)
		if err != nil {
			return err
		}
		if strings.TrimSpace(string(b)) != "0" {
			return fmt.Errorf("cachectl top exited %s after q, want 0", b)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestCachectlLogStreamsWhatTheFilterSelects: `cachectl log --status 5xx`
// against a cluster shows the 5xx answers of every node and nothing else;
// --format ncsa prints NCSA combined lines; a filter that cannot match is
// refused with the reason.
func TestCachectlLogStreamsWhatTheFilterSelects(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	origin := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/err/") {
			http.Error(w, "down", http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Cache-Control", "max-age=60")
		io.WriteString(w, "ok")
	})
	c := startClusterWith(t, ctx, clusterConfig{nodes: 2, origin: origin})
	bin := filepath.Join(binDir, "cachectl")
	base := []string{"--control-plane", c.control, "--token", c.token, "log"}

	out, err := exec.CommandContext(ctx, bin, append(base, "--status", "7xx")...).CombinedOutput()
	if err == nil || !strings.Contains(string(out), `"7xx"`) {
		t.Fatalf("cachectl log --status 7xx: %v %s; want a refusal naming the status", err, out)
	}

	stream := func(args ...string) (*lineBuffer, *exec.Cmd) {
		t.Helper()
		lines := &lineBuffer{}
		cmd := exec.CommandContext(ctx, bin, append(base, args...)...)
		cmd.Stdout = lines
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
		return lines, cmd
	}
	errs, _ := stream("--status", "5xx")
	ncsa, _ := stream("--format", "ncsa", "--path-prefix", "/ok/")
	client := &http.Client{Timeout: 10 * time.Second}
	i := 0
	seen := func(lines *lineBuffer, want string) bool {
		for _, nd := range c.nodes {
			if !strings.Contains(lines.String(), want+nd.id) {
				return false
			}
		}
		return true
	}
	err = eventually(ctx, func() error {
		for _, nd := range c.nodes {
			for _, p := range []string{"/ok/a", "/err/a", "/ok/b"} {
				resp, err := client.Get(fmt.Sprintf("http://%s%s%d", nd.client, p, i))
				if err != nil {
					return err
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		}
		i++
		if !seen(errs, `"node":"`) || !strings.Contains(ncsa.String(), `"GET /ok/`) {
			return fmt.Errorf("streams so far:\n%s\n%s", errs, ncsa)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(strings.TrimSpace(errs.String()), "\n") {
		if !strings.Contains(l, `"status":503`) || !strings.Contains(l, `"path":"/err/`) {
			t.Errorf("cachectl log --status 5xx printed %s", l)
		}
	}
	combined := regexp.MustCompile(`^127\.0\.0\.1 - - \[\d\d/\w{3}/\d{4}:\d\d:\d\d:\d\d [+-]\d{4}\] "GET /ok/\S+ HTTP/1\.1" 200 2 "-" "Go-http-client/1\.1"$`)
	for _, l := range strings.Split(strings.TrimSpace(ncsa.String()), "\n") {
		if !combined.MatchString(l) {
			t.Errorf("cachectl log --format ncsa printed %q, not an NCSA combined line for /ok/", l)
		}
	}
}

// lineBuffer collects a process's output, safe to read while it writes.
type lineBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lineBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lineBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
