package dataplane

import (
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/shardcache/shardcache/dataplane/httpcache"
	pb "github.com/shardcache/shardcache/proto/shardcache/v1"
)

// cacheStatus parses resp's Cache-Status as the Structured Fields List
// RFC 9211 makes it, failing the test when it is not one.
func cacheStatus(t *testing.T, resp *http.Response, field string) []httpcache.ListMember {
	t.Helper()
	v := strings.Join(resp.Header.Values(field), ", ")
	members, ok := httpcache.ParseList(v)
	if !ok {
		t.Fatalf("%s %q is not a Structured Fields List", field, v)
	}
	return members
}

// TestCacheStatusAndProxyStatus checks Cache-Status (RFC 9211) for a miss,
// a hit, a relayed hit (the owner's member, then the relaying node's), a
// stale answer and a bypass, and Proxy-Status (RFC 9209) for an origin
// that refuses connections.
func TestCacheStatusAndProxyStatus(t *testing.T) {
	o := &scripted{counts: map[string]int{}, handlers: map[string]func(http.ResponseWriter, *http.Request, int){
		"/cs/": func(w http.ResponseWriter, r *http.Request, n int) {
			w.Header().Set("Cache-Control", "max-age=600")
			w.Write([]byte("body"))
		},
		"/cs/stale/": func(w http.ResponseWriter, r *http.Request, n int) {
			w.Header().Set("Cache-Control", "max-age=1, stale-while-revalidate=600")
			w.Header().Set("Age", "100")
			w.Write([]byte("body"))
		},
	}}
	origin := httptest.NewServer(o)
	defer origin.Close()
	a, b, e := startPair(t, origin.URL, noHotKeys)
	member := func(resp *http.Response, i int) httpcache.ListMember {
		t.Helper()
		ms := cacheStatus(t, resp, "Cache-Status")
		if i >= len(ms) {
			t.Fatalf("Cache-Status %q has %d members, want a member %d", resp.Header.Values("Cache-Status"), len(ms), i+1)
		}
		return ms[i]
	}
	path := pathOwnedBy(t, e, "/cs/", "b")
	owner := "http://" + b.ClientAddr().String()
	resp, _ := do(t, "GET", owner+path)
	if m := member(resp, 0); m.Item != "b" || m.Params["fwd"] != "uri-miss" || m.Params["fwd-status"] != "200" || m.Params["stored"] != "?1" {
		t.Fatalf("a miss: Cache-Status %q", resp.Header.Values("Cache-Status"))
	}
	resp, _ = do(t, "GET", owner+path)
	if m := member(resp, 0); m.Params["hit"] != "?1" || !between(m.Params["ttl"], 590, 600) {
		t.Fatalf("a hit: Cache-Status %q", resp.Header.Values("Cache-Status"))
	}
	resp, _ = do(t, "GET", "http://"+a.ClientAddr().String()+path)
	if ms := cacheStatus(t, resp, "Cache-Status"); len(ms) != 2 || ms[0].Item != "b" || ms[0].Params["hit"] != "?1" ||
		ms[1].Item != "a" || ms[1].Params["fwd"] != "uri-miss" || ms[1].Params["detail"] != "relayed" {
		t.Fatalf("a relayed hit: Cache-Status %q; want the owner's hit, then the relaying node", resp.Header.Values("Cache-Status"))
	}

	stale := pathOwnedBy(t, e, "/cs/stale/", "b")
	do(t, "GET", owner+stale)
	resp, _ = do(t, "GET", owner+stale)
	if m := member(resp, 0); resp.Header.Get("X-Cache") != "UPDATING" || m.Params["hit"] != "?1" || !strings.HasPrefix(m.Params["ttl"], "-") {
		t.Fatalf("a stale answer (%s): Cache-Status %q; want a hit of negative ttl", resp.Header.Get("X-Cache"), resp.Header.Values("Cache-Status"))
	}

	resp, _ = do(t, "GET", owner+path, "Cache-Control", "no-store")
	if m := member(resp, 0); m.Params["fwd"] != "request" || m.Params["fwd-status"] != "200" {
		t.Fatalf("a request that bypasses (no-store): Cache-Status %q", resp.Header.Values("Cache-Status"))
	}
	resp, _ = do(t, "POST", owner+path)
	if m := member(resp, 0); m.Params["fwd"] != "method" {
		t.Fatalf("a POST: Cache-Status %q", resp.Header.Values("Cache-Status"))
	}

	// An origin that refuses connections: the node's 502 says why.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	down := "http://" + l.Addr().String()
	l.Close()
	_, n := startOne(t, down)
	resp, _ = do(t, "GET", "http://"+n.ClientAddr().String()+"/down")
	ps := cacheStatus(t, resp, "Proxy-Status")
	if resp.StatusCode != http.StatusBadGateway || len(ps) != 1 || ps[0].Item != "a" || ps[0].Params["error"] != "connection_refused" || ps[0].Params["details"] == "" ||
		strings.Contains(resp.Header.Get("Proxy-Status"), strings.TrimPrefix(down, "http://")) {
		t.Fatalf("origin refusing connections: %d, Proxy-Status %q; want 502 and error=connection_refused, not naming the origin", resp.StatusCode, resp.Header.Values("Proxy-Status"))
	}
	cacheStatus(t, resp, "Cache-Status")
}

// between reports whether v is an integer in [lo, hi].
func between(v string, lo, hi int) bool {
	n, err := strconv.Atoi(v)
	return err == nil && n >= lo && n <= hi
}

// TestLocalEstimateJudgesAsTheStore: the estimate of a local-only cache
// reads the owner's Cache-Status, so a response the store does not keep
// (private) is never an estimated hit, while a stored one is, through a
// relaying node as on the owner.
func TestLocalEstimateJudgesAsTheStore(t *testing.T) {
	o := &scripted{counts: map[string]int{}, handlers: map[string]func(http.ResponseWriter, *http.Request, int){
		"/est/kept/": func(w http.ResponseWriter, r *http.Request, n int) { w.Header().Set("Cache-Control", "max-age=600") },
		"/est/private/": func(w http.ResponseWriter, r *http.Request, n int) {
			w.Header().Set("Cache-Control", "private, max-age=600")
		},
	}}
	origin := httptest.NewServer(o)
	defer origin.Close()
	a, _, e := startPair(t, origin.URL, noHotKeys)
	url := "http://" + a.ClientAddr().String()
	hits := func() float64 { return metricValue(t, a, "shardcache_local_estimate_hits_total") }
	private := pathOwnedBy(t, e, "/est/private/", "b")
	for range 3 {
		do(t, "GET", url+private)
	}
	if h := hits(); h != 0 {
		t.Fatalf("%v estimated hits for a response the store does not keep, want 0", h)
	}
	kept := pathOwnedBy(t, e, "/est/kept/", "b")
	for range 3 {
		do(t, "GET", url+kept)
	}
	waitFor(t, "two estimated hits", func() bool { return hits() == 2 })
}

// TestCacheStatusKeyAndCollapsed: a policy's cache_status_key adds the
// key to Cache-Status; a request served from another's fill says
// collapsed.
func TestCacheStatusKeyAndCollapsed(t *testing.T) {
	release := make(chan struct{})
	o := &scripted{counts: map[string]int{}, handlers: map[string]func(http.ResponseWriter, *http.Request, int){
		"/key/": func(w http.ResponseWriter, r *http.Request, n int) { w.Header().Set("Cache-Control", "max-age=600") },
		"/slow/": func(w http.ResponseWriter, r *http.Request, n int) {
			w.Header().Set("Cache-Control", "max-age=600")
			w.WriteHeader(200)
			w.(http.Flusher).Flush()
			<-release
			w.Write([]byte("done"))
		},
	}}
	origin := httptest.NewServer(o)
	defer origin.Close()
	_, n := startOne(t, origin.URL)
	if err := n.ApplyPolicies(&pb.PolicySet{Revision: 2, Policies: []*pb.CachePolicy{{Name: "k", PathPrefix: "/key/", CacheStatusKey: true}}}); err != nil {
		t.Fatal(err)
	}
	base := "http://" + n.ClientAddr().String()
	do(t, "GET", base+"/key/a")
	resp, _ := do(t, "GET", base+"/key/a")
	if m := cacheStatus(t, resp, "Cache-Status")[0]; m.Params["key"] != "http127.0.0.1/key/a" {
		t.Fatalf("cache_status_key: Cache-Status %q; want key=\"http127.0.0.1/key/a\"", resp.Header.Values("Cache-Status"))
	}
	// The leader's fill waits on the origin's body; a second request for
	// the key shares it.
	leader := make(chan *http.Response, 1)
	go func() { r, _ := do(t, "GET", base+"/slow/b"); leader <- r }()
	waitFor(t, "the origin to get the leader's request", func() bool { return o.count("/slow/b") == 1 })
	follower := make(chan *http.Response, 1)
	go func() { r, _ := do(t, "GET", base+"/slow/b"); follower <- r }()
	waitFor(t, "the second request to wait on the fill", func() bool {
		return metricValue(t, n, "shardcache_collapsed_requests_total") >= 1 || n.owner.Waiting() > 0
	})
	close(release)
	resp = <-follower
	<-leader
	if m := cacheStatus(t, resp, "Cache-Status")[0]; resp.Header.Get("X-Cache") != "HIT" || m.Params["collapsed"] != "?1" || m.Params["fwd"] != "uri-miss" || m.Params["key"] != "" {
		t.Fatalf("a request collapsed onto another's fill: X-Cache %q, Cache-Status %q; want HIT, and fwd=uri-miss; collapsed without a key",
			resp.Header.Get("X-Cache"), resp.Header.Values("Cache-Status"))
	}
	if o.count("/slow/b") != 1 {
		t.Fatalf("the origin saw %d requests for the collapsed key, want 1", o.count("/slow/b"))
	}
}

// TestAdmissionRefusalIsNamed: a response the disk tier does not admit
// (its file system below the free-space guard) is answered unstored, and
// its Cache-Status, the reason counter and the owner's note say why.
func TestAdmissionRefusalIsNamed(t *testing.T) {
	origin := httptest.NewServer(&testOrigin{})
	defer origin.Close()
	_, n := startOne(t, origin.URL, noHotKeys, func(c *Config) { c.DiskMinFree = 1 << 62 })
	resp, _ := do(t, "GET", "http://"+n.ClientAddr().String()+"/adm/a")
	if cs := resp.Header.Get("Cache-Status"); resp.Header.Get("X-Cache") != "MISS" || !strings.Contains(cs, "; detail=admission") || strings.Contains(cs, "stored") {
		t.Fatalf("a refused fill: X-Cache %q, Cache-Status %q; want MISS, not stored, detail=admission", resp.Header.Get("X-Cache"), cs)
	}
	// The request is accounted once its answer is written: the client can
	// read the answer first.
	waitFor(t, "the refused fill to be counted", func() bool {
		return metricValue(t, n, "shardcache_request_reasons_total", `reason="admission"`) >= 1
	})
	if v := metricValue(t, n, "shardcache_request_reasons_total", `reason="admission"`); v != 1 {
		t.Fatalf("shardcache_request_reasons_total{reason=admission} = %v, want 1", v)
	}
	host := n.ClientAddr().String()
	host = host[:strings.LastIndexByte(host, ':')]
	if note, ok := n.owner.Note("http" + host + "/adm/a"); !ok || note.Reason != "admission" || note.Stored || note.Cache != "MISS" {
		t.Fatalf("the owner's note %+v, %t; want a MISS not stored, for admission", note, ok)
	}
}
