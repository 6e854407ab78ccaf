package dataplane

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	pb "github.com/shardcache/shardcache/proto/shardcache/v1"
	"google.golang.org/protobuf/types/known/durationpb"
)

// hotAtSecond makes path hot at its second owner (by HEADs, which keep
// no copy there) once the first owner has stored it, and returns the
// second owner's GET answer, which is served from its own store, filled
// from the first owner.
func hotAtSecond(t *testing.T, nodes map[string]*Node, e *pb.RingEpoch, path string) (first, second *Node, resp *http.Response, body string) {
	t.Helper()
	owners := ownersOf(t, e, "http127.0.0.1"+path, 3)
	first, second = nodes[owners[0]], nodes[owners[1]]
	if r, _ := do(t, "GET", "http://"+first.ClientAddr().String()+path); r.StatusCode != 200 {
		t.Fatalf("GET %s via its owner: %d", path, r.StatusCode)
	}
	for range 3 {
		if r, _ := do(t, "HEAD", "http://"+second.ClientAddr().String()+path); r.StatusCode != 200 {
			t.Fatalf("HEAD via second owner: %d", r.StatusCode)
		}
	}
	resp, body = do(t, "GET", "http://"+second.ClientAddr().String()+path)
	if resp.Header.Get("X-Cache-Node") != second.ID() {
		t.Fatalf("hot key via its second owner %s: served by %s", second.ID(), resp.Header.Get("X-Cache-Node"))
	}
	return first, second, resp, body
}

// A hot key's second owner fills from the first owner; the object there is
// 900 s old (the origin's Age) of a 1000 s lifetime. The second owner must
// not make it fresh for a whole new lifetime.
func TestSecondOwnerFillKeepsTheObjectsAge(t *testing.T) {
	fc := startFakeControl(t, "127.0.0.1:0")
	o := &testOrigin{header: http.Header{"Age": {"900"}, "Cache-Control": {"max-age=1000"}}}
	origin := httptest.NewServer(o)
	defer origin.Close()
	nodes, e := startHotTrio(t, fc, origin.URL, 35)
	path := "/aged/1"
	first, _, resp, _ := hotAtSecond(t, nodes, e, path)
	r1, _ := do(t, "GET", "http://"+first.ClientAddr().String()+path)
	t.Logf("first owner: Age %s Cache-Status %q", r1.Header.Get("Age"), r1.Header.Values("Cache-Status"))
	t.Logf("second owner: Age %s X-Cache %s Cache-Status %q", resp.Header.Get("Age"), resp.Header.Get("X-Cache"), resp.Header.Values("Cache-Status"))
	age, _ := strconv.Atoi(resp.Header.Get("Age"))
	if age < 900 {
		t.Fatalf("second owner answers Age %d for an object 900+ s old at the first owner: fresh for a new lifetime", age)
	}
	if n := o.count(path); n != 1 {
		t.Fatalf("origin saw %d requests", n)
	}
}

// What the first owner adds to its answer (its Cache-Status member) is not
// the object's: the second owner does not store it and serve it on its hits.
func TestSecondOwnerDoesNotStoreFirstOwnersCacheStatus(t *testing.T) {
	fc := startFakeControl(t, "127.0.0.1:0")
	o := &testOrigin{}
	origin := httptest.NewServer(o)
	defer origin.Close()
	nodes, e := startHotTrio(t, fc, origin.URL, 35)
	path := "/cs/1"
	first, second, _, _ := hotAtSecond(t, nodes, e, path)
	// A hit at the second owner, from its store.
	resp, _ := do(t, "GET", "http://"+second.ClientAddr().String()+path)
	t.Logf("second owner hit: X-Cache %s node %s Cache-Status %q", resp.Header.Get("X-Cache"), resp.Header.Get("X-Cache-Node"), resp.Header.Values("Cache-Status"))
	for _, v := range resp.Header.Values("Cache-Status") {
		for _, m := range strings.Split(v, ",") {
			if strings.HasPrefix(strings.TrimSpace(m), first.ID()+";") || strings.TrimSpace(m) == first.ID() {
				t.Fatalf("second owner %s's hit carries the first owner %s's Cache-Status member %q, stored as the object's", second.ID(), first.ID(), m)
			}
		}
	}
}

// An answer the owner makes of its own (a 504 to only-if-cached) is no
// object: a non-owner keeping it as a copy (under a policy default TTL)
// serves it to every other client.
func TestNonOwnerKeepsNoCopyOfOwnersOnlyIfCached504(t *testing.T) {
	fc := startFakeControl(t, "127.0.0.1:0")
	o := &testOrigin{}
	origin := httptest.NewServer(o)
	defer origin.Close()
	nodes, e := startDefaultTTLTrio(t, fc, origin.URL)
	path := "/oic/1"
	owners := ownersOf(t, e, "http127.0.0.1"+path, 3)
	other := nodes[owners[2]]
	resp, _ := do(t, "GET", "http://"+other.ClientAddr().String()+path, "Cache-Control", "only-if-cached")
	if resp.StatusCode != http.StatusGatewayTimeout {
		t.Fatalf("only-if-cached for an uncached key: %d, want 504", resp.StatusCode)
	}
	// Another client, asking plainly.
	resp, body := do(t, "GET", "http://"+other.ClientAddr().String()+path)
	if resp.StatusCode != 200 {
		t.Fatalf("a plain GET via non-owner %s after another client's only-if-cached: %d %s from %s (X-Cache %s), body %q",
			other.ID(), resp.StatusCode, resp.Status, resp.Header.Get("X-Cache-Node"), resp.Header.Get("X-Cache"), body)
	}
}

// The same for the owner's own 502 while the origin is unreachable: the
// owner stores nothing, and once the origin is back it answers 200; a
// non-owner that kept the 502 as a copy (policy default TTL) serves it on.
func TestNonOwnerKeepsNoCopyOfOwnersOwn502(t *testing.T) {
	fc := startFakeControl(t, "127.0.0.1:0")
	var down atomic.Bool
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if down.Load() {
			c, _, _ := w.(http.Hijacker).Hijack()
			c.Close() // the origin drops the connection: unreachable
			return
		}
		w.Header().Set("Cache-Control", "max-age=60")
		io.WriteString(w, "ok")
	}))
	defer origin.Close()
	nodes, e := startDefaultTTLTrio(t, fc, origin.URL)
	path := "/down/1"
	owners := ownersOf(t, e, "http127.0.0.1"+path, 3)
	first, other := nodes[owners[0]], nodes[owners[2]]
	down.Store(true)
	resp, _ := do(t, "GET", "http://"+other.ClientAddr().String()+path)
	if resp.StatusCode != http.StatusBadGateway {
		t.Fatalf("origin down: %d, want 502", resp.StatusCode)
	}
	down.Store(false)
	if r, _ := do(t, "GET", "http://"+first.ClientAddr().String()+path); r.StatusCode != 200 {
		t.Fatalf("the owner, origin back: %d", r.StatusCode)
	}
	resp, body := do(t, "GET", "http://"+other.ClientAddr().String()+path)
	if resp.StatusCode != 200 {
		t.Fatalf("via non-owner %s with the origin back (its owner answers 200): %d from %s (X-Cache %s), body %q",
			other.ID(), resp.StatusCode, resp.Header.Get("X-Cache-Node"), resp.Header.Get("X-Cache"), body)
	}
}

// startDefaultTTLTrio is startHotTrio under a policy with a default TTL,
// which would let a non-owner keep an answer that states no freshness.
func startDefaultTTLTrio(t *testing.T, fc *fakeControl, origin string) (map[string]*Node, *pb.RingEpoch) {
	t.Helper()
	nodes, e := startHotTrio(t, fc, origin, 1000)
	set := &pb.PolicySet{Revision: 2, Policies: []*pb.CachePolicy{{Name: "all", PathPrefix: "/", HotThreshold: 1000, DefaultTtl: durationpb.New(60e9)}}}
	for _, n := range nodes {
		applyAll(t, set, n)
	}
	return nodes, e
}
