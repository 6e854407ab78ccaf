package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	pb "github.com/shardcache/shardcache/proto/shardcache/v1"
	"github.com/shardcache/shardcache/sdk/admin"
)

// versionOrigin serves "v<generation> <path>": a test bumps the generation
// when it changes the content, then purges. Responses are tagged by their
// path's first segment (Surrogate-Key) and "parity-even" or "parity-odd" of
// their last (Cache-Tag) under /t/.
type versionOrigin struct {
	gen    atomic.Int32
	mu     sync.Mutex
	counts map[string]int
}

func (o *versionOrigin) count(path string) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.counts[path]
}

func newVersionOrigin() *versionOrigin {
	o := &versionOrigin{counts: map[string]int{}}
	o.gen.Store(1)
	return o
}

func (o *versionOrigin) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	o.mu.Lock()
	o.counts[r.URL.Path]++
	o.mu.Unlock()
	seg := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
	parity := "odd"
	if n, err := strconv.Atoi(seg[len(seg)-1]); err == nil && n%2 == 0 {
		parity = "even"
	}
	w.Header().Set("Cache-Control", "public, max-age=3600")
	if seg[0] == "s" {
		// What a soft purge marks stale is served within this window
		// while it is fetched again.
		w.Header().Set("Cache-Control", "public, max-age=3600, stale-while-revalidate=600")
	}
	w.Header().Set("Surrogate-Key", seg[0])
	if seg[0] == "t" {
		w.Header().Set("Cache-Tag", "parity-"+parity)
	}
	fmt.Fprintf(w, "v%d %s", o.gen.Load(), r.URL.Path)
}

// fetch GETs path through nd and returns X-Cache and the body.
func fetch(t *testing.T, client *http.Client, nd *node, path string) (string, string) {
	t.Helper()
	resp, err := client.Get("http://" + nd.client + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s via %s: %d %q %v", path, nd.id, resp.StatusCode, b, err)
	}
	return resp.Header.Get("X-Cache"), string(b)
}

// fetchAll GETs every path, 16 at a time, path i through node i+shift,
// and returns the X-Cache of each.
func fetchAll(t *testing.T, c *cluster, paths []string, shift int) []string {
	t.Helper()
	out := make([]string, len(paths))
	var next atomic.Int64
	var wg sync.WaitGroup
	var failed atomic.Value
	for range 16 {
		wg.Go(func() {
			client := &http.Client{Timeout: 30 * time.Second}
			for {
				i := int(next.Add(1) - 1)
				if i >= len(paths) {
					return
				}
				nd := c.nodes[(i+shift)%len(c.nodes)]
				resp, err := client.Get("http://" + nd.client + paths[i])
				if err != nil {
					failed.Store(err)
					return
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				out[i] = resp.Header.Get("X-Cache")
			}
		})
	}
	wg.Wait()
	if err, ok := failed.Load().(error); ok {
		t.Fatal(err)
	}
	return out
}

func (c *cluster) admin(t *testing.T, token string) *admin.Client {
	t.Helper()
	a, err := admin.New(admin.Config{Address: c.control, Token: token})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	return a
}

// purgeJSON is the part of a purge's status (cachectl -o json, PURGE's
// answer) the tests read.
type purgeJSON struct {
	Purge struct {
		ID string `json:"id"`
	} `json:"purge"`
	Complete bool     `json:"complete"`
	Pending  []string `json:"pending"`
	Results  []struct {
		NodeID         string `json:"node_id"`
		ObjectsRemoved uint64 `json:"objects_removed"`
		Sweeping       bool   `json:"sweeping"`
	} `json:"results"`
	Unreachable []struct {
		NodeID string `json:"node_id"`
		Since  string `json:"since"`
	} `json:"unreachable"`
}

// TestPurgesAcrossTheCluster covers the purges an operator makes: a URL
// (with its hot copies) by HTTP PURGE, 10,000 objects by prefix with
// cachectl, a tag with the SDK; then the refusals: no token, a wrong
// token, and a control plane that is down.
func TestPurgesAcrossTheCluster(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	origin := newVersionOrigin()
	c := startClusterWith(t, ctx, clusterConfig{nodes: 3, origin: origin, nodeArgs: func(i int) []string {
		// Hot above 100 requests a minute at a node: the hot item, not
		// the objects fetched once each.
		args := []string{"--hot-threshold", "100"}
		if i == 1 {
			// node-1 takes PURGE from this machine without a token.
			args = append(args, "--purge-allow", "127.0.0.1/32", "--admin-token", "e2e-token")
		}
		return args
	}})
	client := &http.Client{Timeout: 30 * time.Second}

	t.Run("URL with hot copies, by HTTP PURGE", func(t *testing.T) {
		const path = "/hot/item"
		// Hot at every node: owners serve it, the others keep copies.
		for range 30 {
			for _, nd := range c.nodes {
				if _, body := fetch(t, client, nd, path); body != "v1 "+path {
					t.Fatalf("body %q", body)
				}
			}
		}
		var copies float64
		for _, nd := range c.nodes {
			copies += metric(t, nd, "shardcache_hot_key_events_total", `event="copy_hit"`)
			copies += metric(t, nd, "shardcache_hot_key_events_total", `event="replica_fill"`)
		}
		if copies == 0 {
			t.Fatal("no node served the hot key from a copy or a second owner: nothing to purge there")
		}
		origin.gen.Store(2)
		req, _ := http.NewRequest("PURGE", "http://"+c.nodes[1].client+path, nil)
		req.Header.Set("Authorization", "Bearer "+c.token)
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var out struct {
			Complete bool        `json:"complete"`
			Purges   []purgeJSON `json:"purges"`
		}
		err = json.NewDecoder(resp.Body).Decode(&out)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK || !out.Complete || len(out.Purges) != 1 || len(out.Purges[0].Results) != 3 {
			t.Fatalf("PURGE: %d %+v %v; want 200, complete, 3 results", resp.StatusCode, out, err)
		}
		// Its owners count what they removed: as a rule in the answer
		// that says the purge is complete (a node's status record, written
		// apart from its purge results, may say it applied the purge a
		// batch earlier), and always soon after.
		for deadline := time.Now().Add(30 * time.Second); ; {
			ps, err := c.admin(t, c.token).GetPurge(ctx, out.Purges[0].Purge.ID, 0)
			if err != nil {
				t.Fatal(err)
			}
			var removed int64
			for _, r := range ps.GetResults() {
				removed += r.GetObjectsRemoved()
			}
			if removed > 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("no node counted the purged object after 30 s: %v", ps.GetResults())
			}
			time.Sleep(100 * time.Millisecond) // the counts come with the nodes' results: nothing to wait on
		}
		// The next request is a miss on the owner; no node serves the old
		// version, from its store or a copy.
		for i, nd := range c.nodes {
			cache, body := fetch(t, client, nd, path)
			if body != "v2 "+path || (i == 0 && cache != "MISS") {
				t.Fatalf("after the purge, %s answered %s %q; want the new version (first a MISS)", nd.id, cache, body)
			}
		}
	})

	t.Run("10,000 objects by prefix, with cachectl", func(t *testing.T) {
		var paths []string
		for i := range 5000 {
			paths = append(paths, fmt.Sprintf("/p/drop/%d", i), fmt.Sprintf("/p/keep/%d", i))
		}
		fetchAll(t, c, paths, 0)
		var st purgeJSON
		if err := c.cachectl(ctx, &st, "purge", "--prefix", "/p/drop/"); err != nil {
			t.Fatal(err)
		}
		if !st.Complete || len(st.Results) != 3 {
			t.Fatalf("purge status %+v: want complete with 3 results", st)
		}
		// A node acknowledges once nothing the purge matches is served;
		// its count follows when its sweep has removed them.
		removed := func(ps *pb.PurgeStatus) (n int64, final bool) {
			final = true
			for _, r := range ps.GetResults() {
				n += r.GetObjectsRemoved()
				final = final && !r.GetSweeping()
			}
			return n, final
		}
		for deadline := time.Now().Add(30 * time.Second); ; {
			ps, err := c.admin(t, c.token).GetPurge(ctx, st.Purge.ID, 0)
			if err != nil {
				t.Fatal(err)
			}
			n, final := removed(ps)
			if n == 5000 || !final {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("nodes removed %d objects after 30 s, want 5000", n)
			}
			time.Sleep(100 * time.Millisecond) // the counts come with the sweeps' results: nothing to wait on
		}
		got := fetchAll(t, c, paths, 1) // through other nodes than the fills
		for i, p := range paths {
			want := "HIT"
			if strings.HasPrefix(p, "/p/drop/") {
				want = "MISS"
			}
			if got[i] != want {
				t.Fatalf("%s after the prefix purge: %s, want %s", p, got[i], want)
			}
			if n, want := origin.count(p), map[string]int{"HIT": 1, "MISS": 2}[want]; n != want {
				t.Fatalf("origin saw %s %d times, want %d", p, n, want)
			}
		}
	})

	t.Run("a tag, with the SDK", func(t *testing.T) {
		var paths []string
		for i := range 300 {
			paths = append(paths, fmt.Sprintf("/t/%d", i))
		}
		fetchAll(t, c, paths, 0)
		st, err := c.admin(t, c.token).PurgeTag(ctx, "parity-even", admin.PurgeOptions{})
		if err != nil || !st.GetComplete() {
			t.Fatalf("tag purge: %v %v", st, err)
		}
		got := fetchAll(t, c, paths, 2)
		for i, p := range paths {
			want := map[bool]string{true: "MISS", false: "HIT"}[i%2 == 0]
			if got[i] != want {
				t.Fatalf("%s after purging tag parity-even: %s, want %s", p, got[i], want)
			}
		}
	})

	t.Run("soft, with cachectl and by HTTP PURGE", func(t *testing.T) {
		const path = "/s/item"
		if cache, _ := fetch(t, client, c.nodes[0], path); cache != "MISS" {
			t.Fatalf("first fetch of %s: %s, want MISS", path, cache)
		}
		soft := func(purge func()) {
			t.Helper()
			gen := origin.gen.Load()
			old := fmt.Sprintf("v%d %s", gen, path)
			if cache, body := fetch(t, client, c.nodes[0], path); cache != "HIT" || body != old {
				t.Fatalf("before the soft purge: %s %q, want a HIT of %q", cache, body, old)
			}
			origin.gen.Store(gen + 1)
			fetches := origin.count(path)
			purge()
			// Served stale once, while it is fetched again.
			if cache, body := fetch(t, client, c.nodes[0], path); body != old || (cache != "UPDATING" && cache != "STALE") {
				t.Fatalf("after the soft purge: %s %q, want the old copy served stale (UPDATING)", cache, body)
			}
			for deadline := time.Now().Add(30 * time.Second); origin.count(path) == fetches; {
				if time.Now().After(deadline) {
					t.Fatal("the soft-purged object was not fetched again within 30 s")
				}
				time.Sleep(20 * time.Millisecond) // the revalidation runs in the background
			}
			// Until the refetch is stored: asked with max-stale, a stale
			// copy is answered without another revalidation.
			want := fmt.Sprintf("v%d %s", gen+1, path)
			for deadline := time.Now().Add(30 * time.Second); ; {
				req, _ := http.NewRequest(http.MethodGet, "http://"+c.nodes[0].client+path, nil)
				req.Header.Set("Cache-Control", "max-stale")
				resp, err := client.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if string(b) == want {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("after the refetch: %q, want %q", b, want)
				}
				time.Sleep(20 * time.Millisecond) // the refetch streams into the store
			}
			for deadline := time.Now().Add(30 * time.Second); ; {
				cache, body := fetch(t, client, c.nodes[0], path)
				if body != want {
					t.Fatalf("after the refetch: %s %q, want %q", cache, body, want)
				}
				if cache == "HIT" {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("after the refetch: %s, want a HIT within 30 s", cache)
				}
				time.Sleep(20 * time.Millisecond) // until the refetch is stored
			}
			if n := origin.count(path); n != fetches+1 {
				t.Fatalf("the origin saw %s %d times after the soft purge, want once", path, n-fetches)
			}
		}
		soft(func() {
			var st purgeJSON
			if err := c.cachectl(ctx, &st, "purge", "--soft", "http://"+c.nodes[0].client+path); err != nil || !st.Complete {
				t.Fatalf("cachectl purge --soft: %+v %v", st, err)
			}
		})
		soft(func() {
			req, _ := http.NewRequest("PURGE", "http://"+c.nodes[2].client+path, nil)
			req.Header.Set("Authorization", "Bearer "+c.token)
			req.Header.Set("X-Purge-Soft", "true")
			resp, err := client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("PURGE with X-Purge-Soft: %d, want 200", resp.StatusCode)
			}
		})
	})

	t.Run("refused without the right token or control plane", func(t *testing.T) {
		const path = "/keep/me"
		fetch(t, client, c.nodes[0], path)
		if _, err := c.admin(t, "wrong").PurgeURL(ctx, "http://"+c.nodes[0].client+path, admin.PurgeOptions{}); !errors.Is(err, admin.ErrUnauthenticated) {
			t.Errorf("gRPC purge with a wrong token: %v, want ErrUnauthenticated", err)
		}
		purge := func(nd *node, auth string) (int, string) {
			req, _ := http.NewRequest("PURGE", "http://"+nd.client+path, nil)
			if auth != "" {
				req.Header.Set("Authorization", auth)
			}
			resp, err := client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			return resp.StatusCode, string(b)
		}
		if code, body := purge(c.nodes[1], ""); code != http.StatusForbidden {
			t.Errorf("PURGE without a token: %d %s, want 403", code, body)
		}
		if code, body := purge(c.nodes[1], "Bearer wrong"); code != http.StatusUnauthorized {
			t.Errorf("PURGE with a malformed token: %d %s, want 401", code, body)
		}
		if cache, _ := fetch(t, client, c.nodes[0], path); cache != "HIT" {
			t.Errorf("a refused purge removed the object: %s", cache)
		}
		// node-1 allows this address: no token needed.
		if code, body := purge(c.nodes[0], ""); code != http.StatusOK {
			t.Errorf("PURGE from an allowed address: %d %s, want 200", code, body)
		}
		// Guessing the token through a node: each wrong guess goes to the
		// control plane (401), until the node refuses the client unread.
		guesses := 0
		for ; guesses < 20; guesses++ {
			code, body := purge(c.nodes[2], "Bearer wrong-guess-"+strconv.Itoa(guesses))
			if code == http.StatusTooManyRequests {
				break
			}
			if code != http.StatusUnauthorized {
				t.Fatalf("PURGE with a wrong token: %d %s, want 401", code, body)
			}
		}
		if guesses != 5 {
			t.Errorf("refused after %d wrong guesses, want 5", guesses)
		}
		if v := metric(t, c.nodes[2], "shardcache_purge_auth_refused_total", `reason="wrong"`); v != 5 {
			t.Errorf("wrong tokens counted: %v, want 5", v)
		}
		if err := c.controlProc.Stop(10 * time.Second); err != nil {
			t.Fatal(err)
		}
		code, body := purge(c.nodes[1], "Bearer "+c.token)
		if code != http.StatusServiceUnavailable || !strings.Contains(body, "control plane") {
			t.Errorf("PURGE with the control plane down: %d %s, want 503 naming the control plane", code, body)
		}
		if err := c.cachectlText(ctx, "purge", "--prefix", "/", "--timeout", "2s"); err == nil || !strings.Contains(err.Error(), "--all") {
			t.Errorf("cachectl purge --prefix / without --all: %v, want a refusal naming --all", err)
		}
		if err := c.cachectlText(ctx, "purge", "http://x/a", "--timeout", "2s"); err == nil {
			t.Error("cachectl purge with the control plane down succeeded")
		}
	})
}

// TestNodeStoppedDuringAPurgeServesNoneOfItsObjects kills a node, purges
// while it is away and restarts it on the same data directory: it applies
// the purge before it serves any of them again.
func TestNodeStoppedDuringAPurgeServesNoneOfItsObjects(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	origin := newVersionOrigin()
	dir := t.TempDir()
	c := startClusterWith(t, ctx, clusterConfig{nodes: 3, origin: origin, nodeArgs: func(i int) []string {
		return []string{"--data-dir", filepath.Join(dir, strconv.Itoa(i)), "--hot-threshold", "-1"}
	}})
	var paths []string
	for i := range 600 {
		paths = append(paths, fmt.Sprintf("/s/%d", i))
	}
	fetchAll(t, c, paths, 0)
	for i, got := range fetchAll(t, c, paths, 0) {
		if got != "HIT" {
			t.Fatalf("%s before the purge: %s, want HIT", paths[i], got)
		}
	}
	stopped := c.nodes[2]
	stopped.proc.Kill()
	origin.gen.Store(2)
	st, err := c.admin(t, c.token).PurgePrefix(ctx, "", "/s/", admin.PurgeOptions{Wait: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range st.GetResults() {
		if r.GetNodeId() == stopped.id {
			t.Fatalf("%s acknowledged a purge while killed: %v", stopped.id, r)
		}
	}
	stopped.proc = startProcess(t, stopped.id, filepath.Join(binDir, "shardcache"), stopped.args...)
	c.waitMembers(ctx, stopped, 3)
	client := &http.Client{Timeout: 30 * time.Second}
	for _, p := range paths {
		if _, body := fetch(t, client, stopped, p); body != "v2 "+p {
			t.Fatalf("restarted %s served %q for %s: an object purged while it was away", stopped.id, body, p)
		}
	}
}
