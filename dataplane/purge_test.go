package dataplane

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	pb "github.com/shardcache/shardcache/proto/shardcache/v1"
)

// purgeOrigin serves "v<generation> <path>", tagged by its first path
// segment (Surrogate-Key) and its last (Cache-Tag); /v/ paths vary by
// Accept-Language.
type purgeOrigin struct {
	gen   atomic.Int32
	total atomic.Int32
}

func (o *purgeOrigin) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	o.total.Add(1)
	seg := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
	w.Header().Set("Cache-Control", "max-age=3600")
	w.Header().Set("Surrogate-Key", seg[0]+" all")
	w.Header().Set("Cache-Tag", "group-"+seg[len(seg)-1])
	if seg[0] == "v" {
		w.Header().Set("Vary", "Accept-Language")
	}
	fmt.Fprintf(w, "v%d %s", o.gen.Load(), r.URL.Path)
}

// newPurgeOrigin starts a purgeOrigin at generation 1: it and its URL.
func newPurgeOrigin(t *testing.T) (*purgeOrigin, string) {
	o := &purgeOrigin{}
	o.gen.Store(1)
	s := httptest.NewServer(o)
	t.Cleanup(s.Close)
	return o, s.URL
}

func TestPurgesReachEveryVariantAndSurviveARestart(t *testing.T) {
	origin, ourl := newPurgeOrigin(t)
	fc := startFakeControl(t, "127.0.0.1:0")
	dir := t.TempDir()
	n, stop := runNode(t, "a", fc.addr, ourl, func(c *Config) { c.DataDir = dir; c.HotThreshold = -1 })
	fc.publish(epochOf(1, n))
	waitEpoch(t, n, 1)

	// expect fetches path through node and checks X-Cache and the version.
	expect := func(n *Node, path, cache string, version int, hdr ...string) {
		t.Helper()
		resp, body := do(t, http.MethodGet, "http://"+n.ClientAddr().String()+path, hdr...)
		if got := resp.Header.Get("X-Cache"); got != cache || body != fmt.Sprintf("v%d %s", version, path) {
			t.Fatalf("GET %s %v: %s %q, want %s of version %d", path, hdr, got, body, cache, version)
		}
	}
	// Results come when each purge's sweep ends, in any order; an exact
	// purge's count of what it removed at once comes ahead of it. result
	// waits for a purge's result with want objects removed (any, when
	// want < 0), its sweep done.
	got := map[string]*pb.PurgeResult{}
	result := func(id string, want int64) *pb.PurgeResult {
		t.Helper()
		timeout := time.After(30 * time.Second)
		for r := got[id]; r == nil || r.GetSweeping() || want >= 0 && r.GetObjectsRemoved() != want; r = got[id] {
			select {
			case r := <-fc.results:
				got[r.GetPurgeId()] = r
			case <-timeout:
				t.Fatalf("purge %s: last result %v; want one with %d objects removed, its sweep done", id, got[id], want)
			}
		}
		if r := got[id]; r.GetError() != "" {
			t.Fatalf("purge %s failed: %s", id, r.GetError())
		}
		return got[id]
	}
	paths := []string{"/a/1", "/a/2", "/b/1"}
	for _, want := range []string{"MISS", "HIT"} {
		for _, p := range paths {
			expect(n, p, want, 1)
		}
		expect(n, "/v/1", want, 1, "Accept-Language", "en")
		expect(n, "/v/1", want, 1, "Accept-Language", "de")
	}
	origin.gen.Store(2)

	// An exact purge removes the URL's marker and every variant.
	fc.pushPurge(&pb.Purge{Id: "url", Kind: pb.PurgeKind_PURGE_KIND_URL, Url: "http://127.0.0.1/v/1", Revision: 10})
	if r := result("url", 3); r.GetRevisionApplied() != 10 {
		t.Errorf("revision applied %d, want 10", r.GetRevisionApplied())
	}
	expect(n, "/v/1", "MISS", 2, "Accept-Language", "de")
	expect(n, "/v/1", "MISS", 2, "Accept-Language", "en")
	expect(n, "/a/1", "HIT", 1)

	// A prefix purge removes what is under it on its host only.
	fc.pushPurge(&pb.Purge{Id: "prefix", Kind: pb.PurgeKind_PURGE_KIND_PREFIX, Host: "127.0.0.1", PathPrefix: "/a/", Revision: 11})
	fc.pushPurge(&pb.Purge{Id: "other-host", Kind: pb.PurgeKind_PURGE_KIND_PREFIX, Host: "other.example", PathPrefix: "/", Revision: 12})
	result("prefix", 2)
	result("other-host", 0)
	expect(n, "/a/1", "MISS", 2)
	expect(n, "/a/2", "MISS", 2)
	expect(n, "/b/1", "HIT", 1)

	// Tags, from either header, in any case.
	origin.gen.Store(3)
	fc.pushPurge(&pb.Purge{Id: "tag", Kind: pb.PurgeKind_PURGE_KIND_TAG, Tag: "B", Revision: 13})
	fc.pushPurge(&pb.Purge{Id: "cache-tag", Kind: pb.PurgeKind_PURGE_KIND_TAG, Tag: "group-2", Revision: 14})
	result("tag", 1)
	result("cache-tag", 1)
	expect(n, "/b/1", "MISS", 3)
	expect(n, "/a/2", "MISS", 3)
	expect(n, "/a/1", "HIT", 2)
	if n.PurgeRevision() != 14 {
		t.Fatalf("purge revision %d, want 14", n.PurgeRevision())
	}
	if v := metricValue(t, n, "shardcache_purge_revision"); v != 14 {
		t.Errorf("shardcache_purge_revision %v, want 14", v)
	}

	// Restarted, the node says which purges it applied and gets only
	// those it missed: here one of everything, issued while it was away.
	stop()
	fc.pushPurge(&pb.Purge{Id: "all", Kind: pb.PurgeKind_PURGE_KIND_PREFIX, PathPrefix: "/", Revision: 15})
	origin.gen.Store(4)
	n, _ = runNode(t, "a", fc.addr, ourl, func(c *Config) { c.DataDir = dir; c.HotThreshold = -1 })
	fc.publish(epochOf(2, n))
	waitEpoch(t, n, 2)
	if got := fc.helloPurgeRev.Load(); got != 14 {
		t.Errorf("restarted node said it applied purge revision %d, want 14", got)
	}
	result("all", -1)
	for _, p := range paths {
		expect(n, p, "MISS", 4)
	}
	expect(n, "/v/1", "MISS", 4, "Accept-Language", "en")
	if n.PurgeRevision() != 15 {
		t.Fatalf("purge revision %d after the restart, want 15", n.PurgeRevision())
	}
}

// A node joins and becomes ready with 150,000 retained purges, sent ahead
// of its snapshot in bounded messages, and is caught up with all of them.
func TestANodeJoinsWith150000RetainedPurges(t *testing.T) {
	const n = 150000
	fc := startFakeControl(t, "127.0.0.1:0")
	fc.mu.Lock()
	for i := range n {
		p := &pb.Purge{Id: fmt.Sprintf("bulk-%06d", i), Kind: pb.PurgeKind_PURGE_KIND_URL, Url: fmt.Sprintf("http://www.example.com/catalogue/%06d", i), Revision: int64(i + 1)}
		if i%10 == 0 {
			p = &pb.Purge{Id: fmt.Sprintf("bulk-%06d", i), Kind: pb.PurgeKind_PURGE_KIND_TAG, Tag: fmt.Sprintf("product-%d", i), Revision: int64(i + 1)}
		}
		fc.purges = append(fc.purges, p)
	}
	fc.mu.Unlock()
	o := &testOrigin{}
	origin := httptest.NewServer(o)
	defer origin.Close()
	start := time.Now()
	a := startNode(t, "a", fc.addr, origin.URL, noHotKeys)
	fc.publish(epochOf(1, a))
	waitEpoch(t, a, 1)
	waitFor(t, "every purge applied", func() bool { return metricValue(t, a, "shardcache_purge_revision") == n })
	t.Logf("ready with %d purges %s after its start", n, time.Since(start).Round(time.Millisecond))
	if resp, body := do(t, "GET", "http://"+a.ClientAddr().String()+"/after"); resp.StatusCode != 200 || body != "body of /after" {
		t.Fatalf("serving after the join: %d %q", resp.StatusCode, body)
	}
}
