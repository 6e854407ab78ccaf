package dataplane

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	pb "github.com/shardcache/shardcache/proto/shardcache/v1"
)

// A node cut off from the control plane longer than its bound may have
// missed a purge: what it stored before the cut (and, as the cut goes on,
// anything older than the bound) is revalidated with the origin before it
// is served, and never served stale; what it stored within the bound is
// served as it is; on return it applies the purges it missed.
func TestACutOffNodeRevalidatesWhatItStoredBeforeTheCut(t *testing.T) {
	var fetches, revalidations atomic.Int32
	originUp := atomic.Bool{}
	originUp.Store(true)
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !originUp.Load() {
			http.Error(w, "down", http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Cache-Control", "max-age=3600, stale-if-error=3600")
		w.Header().Set("ETag", `"v1"`)
		if r.Header.Get("If-None-Match") == `"v1"` {
			revalidations.Add(1)
			w.WriteHeader(http.StatusNotModified)
			return
		}
		fetches.Add(1)
		io.WriteString(w, "body of "+r.URL.Path)
	}))
	defer origin.Close()
	fc := startFakeControl(t, "127.0.0.1:0")
	addr := fc.addr
	n := startNode(t, "a", addr, origin.URL, noHotKeys, func(c *Config) { c.CutOffBound = 2 * time.Second })
	fc.publish(epochOf(1, n))
	waitEpoch(t, n, 1)
	base := "http://" + n.ClientAddr().String()
	var cacheStatus string // the last answer's
	get := func(path string) (string, int) {
		t.Helper()
		resp, body := do(t, "GET", base+path)
		if resp.StatusCode == 200 && body != "body of "+path {
			t.Fatalf("%s: %q", path, body)
		}
		cacheStatus = resp.Header.Get("Cache-Status")
		return resp.Header.Get("X-Cache"), resp.StatusCode
	}
	get("/before")
	if c, _ := get("/before"); c != "HIT" {
		t.Fatalf("before the cut: %s, want HIT", c)
	}
	fc.publish(epochOf(2, n)) // heard from after /before was stored
	waitEpoch(t, n, 2)

	fc.srv.Stop() // cut off
	waitFor(t, "the node to take itself for cut off", func() bool {
		return metricValue(t, n, "shardcache_control_plane_cut_off") == 1
	})
	if c, code := get("/before"); c != "REVALIDATED" || code != 200 || revalidations.Load() != 1 {
		t.Fatalf("stored before the cut, past the bound: %s %d after %d revalidations, want REVALIDATED after 1", c, code, revalidations.Load())
	}
	if !strings.Contains(cacheStatus, "; detail=cut-off") {
		t.Fatalf("the revalidation the cut forced: Cache-Status %q; want detail=cut-off", cacheStatus)
	}
	if c, _ := get("/before"); c != "HIT" {
		t.Fatalf("once the origin confirmed it (within the bound): %s, want HIT", c)
	}
	get("/after")
	if c, _ := get("/after"); c != "HIT" {
		t.Fatalf("stored during the cut, within the bound: %s, want HIT", c)
	}
	if fetches.Load() != 2 {
		t.Fatalf("%d full fetches, want 2 (one per path)", fetches.Load())
	}

	// On return the node applies the purge it missed before it serves the
	// object again.
	fc2 := startFakeControl(t, addr)
	fc2.pushPurge(&pb.Purge{Id: "missed", Kind: pb.PurgeKind_PURGE_KIND_URL, Url: "http://127.0.0.1/after", Revision: 7})
	fc2.publish(epochOf(3, n))
	waitEpoch(t, n, 3)
	waitFor(t, "the cut to end", func() bool { return metricValue(t, n, "shardcache_control_plane_cut_off") == 0 })
	if c, _ := get("/after"); c != "MISS" {
		t.Fatalf("purged while the node was cut off: %s after its return, want MISS", c)
	}

	// Cut off again with the origin down: an object stored before the cut
	// is not served stale, though stale-if-error would allow it.
	fc2.srv.Stop()
	waitFor(t, "the second cut", func() bool { return metricValue(t, n, "shardcache_control_plane_cut_off") == 1 })
	originUp.Store(false)
	if c, code := get("/before"); code < 500 || c == "STALE" {
		t.Fatalf("cut off, origin down: %s %d, want an error, not the unconfirmed copy", c, code)
	}
}
