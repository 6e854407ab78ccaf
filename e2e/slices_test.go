package e2e

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"sync"
	"testing"
	"time"

	pb "github.com/shardcache/shardcache/proto/shardcache/v1"
)

// rangeOrigin serves one fixed object at every path with a strong ETag,
// honouring Range, and counts requests by Range.
type rangeOrigin struct {
	body []byte
	mu   sync.Mutex
	seen map[string]int
}

func (o *rangeOrigin) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	o.mu.Lock()
	o.seen[r.Header.Get("Range")]++
	o.mu.Unlock()
	w.Header().Set("Cache-Control", "public, max-age=3600")
	w.Header().Set("Etag", `"large-1"`)
	http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(o.body))
}

func (o *rangeOrigin) count(rng string) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.seen[rng]
}

// putPolicy stores p through the admin API and waits until every node of
// c runs the revision it made.
func putPolicy(ctx context.Context, t *testing.T, c *cluster, p *pb.CachePolicy) {
	t.Helper()
	stored, err := c.admin(t, c.token).PutPolicy(ctx, p, false)
	if err != nil {
		t.Fatal(err)
	}
	for _, nd := range c.nodes {
		if err := eventually(ctx, func() error {
			if v := metric(t, nd, "shardcache_policy_revision"); v != float64(stored.GetRevision()) {
				return fmt.Errorf("%s runs policy revision %v", nd.id, v)
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
}

// TestSlicedObjectAcrossProcesses applies a slicing policy with cachectl,
// reads an object through every node (each slice reaches the origin
// once), then kills a node and reads it again.
func TestSlicedObjectAcrossProcesses(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const slice = 1 << 20
	body := make([]byte, 5*slice+3)
	for i := range body {
		body[i] = byte(i*31 + i/997)
	}
	o := &rangeOrigin{body: body, seen: map[string]int{}}
	c := startClusterWith(t, ctx, clusterConfig{nodes: 3, origin: o})
	putPolicy(ctx, t, c, &pb.CachePolicy{Name: "large", PathPrefix: "/large/", SliceSize: slice})
	client := &http.Client{Timeout: 30 * time.Second}
	read := func(nd *node, rng string) (int, []byte) {
		t.Helper()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+nd.client+"/large/object", nil)
		if rng != "" {
			req.Header.Set("Range", rng)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatalf("via %s: %v", nd.id, err)
		}
		return resp.StatusCode, b
	}
	for _, nd := range c.nodes {
		if code, got := read(nd, ""); code != 200 || !bytes.Equal(got, body) {
			t.Fatalf("via %s: %d, %d bytes", nd.id, code, len(got))
		}
		if code, got := read(nd, "bytes=1048000-3146000"); code != 206 || !bytes.Equal(got, body[1048000:3146001]) {
			t.Fatalf("range via %s: %d, %d bytes", nd.id, code, len(got))
		}
	}
	for i := range 6 {
		if n := o.count(fmt.Sprintf("bytes=%d-%d", i*slice, (i+1)*slice-1)); n != 1 {
			t.Errorf("slice %d reached the origin %d times, want once", i, n)
		}
	}
	if n := metric(t, c.nodes[0], "shardcache_requests_total", `route="sliced"`); n < 2 {
		t.Errorf("node-1 counted %v sliced requests, want 2", n)
	}

	// A node dies: the others serve its slices themselves.
	c.nodes[2].proc.Kill()
	for _, nd := range c.nodes[:2] {
		if code, got := read(nd, ""); code != 200 || !bytes.Equal(got, body) {
			t.Fatalf("via %s with node-3 dead: %d, %d bytes", nd.id, code, len(got))
		}
	}
}
