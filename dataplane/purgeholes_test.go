package dataplane

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"

	"google.golang.org/grpc"

	pb "github.com/shardcache/shardcache/proto/shardcache/v1"
)

// fakeAdmin records PURGE requests' purges as the control plane does
// (controlplane/purge.go: the prefix host lower-cased, the path prefix
// as given) and pushes them to the fake control plane's sessions.
type fakeAdmin struct {
	pb.UnimplementedAdminServiceServer
	fc  *fakeControl
	rev atomic.Int64
	got chan *pb.Purge
}

func (a *fakeAdmin) record(p *pb.Purge) *pb.PurgeStatus {
	p.Revision = a.rev.Add(1)
	p.Id = fmt.Sprint("p", p.Revision)
	a.fc.pushPurge(p)
	a.got <- p
	return &pb.PurgeStatus{Complete: true}
}

func (a *fakeAdmin) PurgePrefix(ctx context.Context, req *pb.PurgePrefixRequest) (*pb.PurgePrefixResponse, error) {
	p := &pb.Purge{Kind: pb.PurgeKind_PURGE_KIND_PREFIX, Host: strings.ToLower(req.GetHost()), PathPrefix: req.GetPathPrefix(), Soft: req.GetSoft()}
	return &pb.PurgePrefixResponse{Status: a.record(p)}, nil
}

func (a *fakeAdmin) Purge(ctx context.Context, req *pb.PurgeRequest) (*pb.PurgeResponse, error) {
	p := &pb.Purge{Kind: pb.PurgeKind_PURGE_KIND_URL, Url: req.GetUrl(), Soft: req.GetSoft()}
	return &pb.PurgeResponse{Status: a.record(p)}, nil
}

// startFakeControlWithAdmin is startFakeControl whose server also
// answers the AdminService, as the control plane's does.
func startFakeControlWithAdmin(t *testing.T) (*fakeControl, *fakeAdmin) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	fc := &fakeControl{wake: make(chan struct{}), addr: l.Addr().String(), srv: grpc.NewServer(), acks: make(chan *pb.PolicyAck, 16),
		results: make(chan *pb.PurgeResult, 64)}
	adm := &fakeAdmin{fc: fc, got: make(chan *pb.Purge, 16)}
	pb.RegisterNodeServiceServer(fc.srv, fc)
	pb.RegisterAdminServiceServer(fc.srv, adm)
	go fc.srv.Serve(l)
	t.Cleanup(fc.srv.Stop)
	return fc, adm
}

// A soft purge drops the hot copies a non-owner keeps, as a hard one
// does: the sweep walks the node's store, never its copies, so a copy was
// served as a fresh hit of the purged content until it expired.
func TestASoftPurgeDropsANonOwnersCopy(t *testing.T) {
	origin, ourl := newPurgeOrigin(t)
	fc, a, b := startPairOn(t, ourl)
	e := epochOf(1, a, b)
	path := pathOwnedBy(t, e, "/soft/", "a")
	get := func(n *Node) (*http.Response, string) {
		return do(t, http.MethodGet, "http://"+n.ClientAddr().String()+path)
	}
	if _, body := get(b); body != "v1 "+path {
		t.Fatalf("first GET via b: %q", body)
	}
	if resp, body := get(b); resp.Header.Get("X-Cache-Node") != "b" || body != "v1 "+path {
		t.Fatalf("second GET via b: from %s %q, want b's copy", resp.Header.Get("X-Cache-Node"), body)
	}
	origin.gen.Store(2)
	fc.pushPurge(&pb.Purge{Id: "soft", Kind: pb.PurgeKind_PURGE_KIND_URL, Url: "http://127.0.0.1" + path, Soft: true, Revision: 1})
	waitFor(t, "both nodes applied the soft purge", func() bool { return a.PurgeRevision() == 1 && b.PurgeRevision() == 1 })
	waitFor(t, "b's sweep done", func() bool { return metricValue(t, b, "shardcache_purge_bans") == 0 })
	// The owner revalidates its marked object: the new version.
	if _, body := get(a); body != "v2 "+path {
		t.Fatalf("via owner a after the soft purge: %q, want v2", body)
	}
	resp, body := get(b)
	if body != "v2 "+path {
		t.Fatalf("via non-owner b after an acknowledged soft purge: %s from %s, %q; want v2 (the copy dropped, the request relayed)",
			resp.Header.Get("X-Cache"), resp.Header.Get("X-Cache-Node"), body)
	}
}

// A prefix PURGE on the client port is matched as its target is spelled,
// escaped, as stored objects record their URL: the decoded prefix
// ("/café/") matched nothing, and the PURGE answered 200.
func TestAPurgePrefixIsMatchedEscaped(t *testing.T) {
	_, ourl := newPurgeOrigin(t)
	fc, adm := startFakeControlWithAdmin(t)
	n := startNode(t, "a", fc.addr, ourl, noHotKeys, func(c *Config) {
		c.PurgeAllow = []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}
		c.AdminToken = "test-admin-token"
	})
	fc.publish(epochOf(1, n))
	waitEpoch(t, n, 1)
	base := "http://" + n.ClientAddr().String()
	for _, c := range []struct{ prefix, path string }{
		{"/caf%C3%A9/", "/caf%C3%A9/menu"},
		{"/a%20b/", "/a%20b/c"},
	} {
		if resp, body := do(t, "GET", base+c.path); resp.StatusCode != 200 || !strings.HasPrefix(body, "v1 ") {
			t.Fatalf("GET %s: %d %q", c.path, resp.StatusCode, body)
		}
		if resp, _ := do(t, "GET", base+c.path); resp.Header.Get("X-Cache") != "HIT" {
			t.Fatalf("GET %s again: %s, want HIT", c.path, resp.Header.Get("X-Cache"))
		}
		resp, body := do(t, "PURGE", base+c.prefix+"*")
		if resp.StatusCode != 200 {
			t.Fatalf("PURGE %s*: %d %s", c.prefix, resp.StatusCode, body)
		}
		p := <-adm.got
		waitFor(t, "purge applied", func() bool { return n.PurgeRevision() == p.GetRevision() })
		if resp, body := do(t, "GET", base+c.path); resp.Header.Get("X-Cache") == "HIT" {
			t.Errorf("GET %s after an acknowledged PURGE %s* (recorded prefix %q): %s %q, want a miss",
				c.path, c.prefix, p.GetPathPrefix(), resp.Header.Get("X-Cache"), body)
		}
	}
}

// slowOrigin sends its header and the first bytes of "v<gen> <uri>"
// padded, then waits for release before the rest.
type slowOrigin struct {
	gen     atomic.Int32
	started chan string
	release chan struct{}
}

func (o *slowOrigin) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body := fmt.Sprintf("v%d %s %s", o.gen.Load(), r.URL.RequestURI(), strings.Repeat("x", 1000))
	w.Header().Set("Cache-Control", "max-age=3600")
	w.Header().Set("Surrogate-Key", "slow-tag")
	w.Header().Set("Content-Length", fmt.Sprint(len(body)))
	w.Header().Set("Content-Type", "application/octet-stream")
	w.WriteHeader(200)
	w.Write([]byte(body[:10]))
	w.(http.Flusher).Flush()
	o.started <- r.URL.Path
	<-o.release
	w.Write([]byte(body[10:]))
}

// A request after a prefix or tag purge joins no fill begun before it
// (the sweep, which applies such purges to the store, waits for that fill
// to end): it fetches anew. It was answered the purged version.
func TestRequestsAfterAPurgeJoinNoFillFromBeforeIt(t *testing.T) {
	for _, kind := range []string{"prefix", "tag"} {
		t.Run(kind, func(t *testing.T) {
			o := &slowOrigin{started: make(chan string, 4), release: make(chan struct{})}
			o.gen.Store(1)
			osrv := httptest.NewServer(o)
			t.Cleanup(osrv.Close)
			fc, n := startOne(t, osrv.URL, noHotKeys)
			path := "/slow/obj"
			url := "http://" + n.ClientAddr().String() + path
			first := make(chan string, 1)
			go func() { _, body, _ := fetchAnswer(url); first <- body }()
			<-o.started // the fill of v1 streams
			o.gen.Store(2)
			p := &pb.Purge{Id: kind, Kind: pb.PurgeKind_PURGE_KIND_PREFIX, Host: "127.0.0.1", PathPrefix: "/slow/", Revision: 1}
			if kind == "tag" {
				p = &pb.Purge{Id: kind, Kind: pb.PurgeKind_PURGE_KIND_TAG, Tag: "slow-tag", Revision: 1}
			}
			fc.pushPurge(p)
			waitFor(t, "purge applied", func() bool { return n.PurgeRevision() == 1 })
			// A request from after the purge.
			after := make(chan string, 1)
			go func() { x, body, _ := fetchAnswer(url); after <- x + " " + body }()
			// Either it went to the origin (a new fill), or it joined the
			// old fill and follows it.
			var newFill bool
			waitFor(t, "the request after the purge to fetch or to join the fill", func() bool {
				select {
				case <-o.started:
					newFill = true
				default:
				}
				return newFill || metricValue(t, n, "shardcache_collapsed_requests_total") >= 1
			})
			t.Logf("request after the purge: new fill %v", newFill)
			close(o.release)
			<-first
			got := <-after
			if strings.Contains(got, "v1 ") {
				t.Fatalf("GET %s after the node applied the %s purge: %.40q, the purged version", path, kind, got)
			}
		})
	}
}

// A prefix purge's host is read as a request's is, without a trailing
// dot: "--host www.example.com." matched nothing, though the URL purge of
// the same spelling did.
func TestAPrefixPurgesHostMayEndInADot(t *testing.T) {
	origin, ourl := newPurgeOrigin(t)
	fc, n := startOne(t, ourl, noHotKeys)
	get := func(path string) (string, string) {
		x, body, err := fetchAnswer("http://"+n.ClientAddr().String()+path, "Host", "www.example.com")
		if err != nil {
			t.Fatal(err)
		}
		return x, body
	}
	get("/a/1")
	get("/b/1")
	origin.gen.Store(2)
	fc.pushPurge(&pb.Purge{Id: "url", Kind: pb.PurgeKind_PURGE_KIND_URL, Url: "http://www.example.com./b/1", Revision: 1})
	fc.pushPurge(&pb.Purge{Id: "prefix", Kind: pb.PurgeKind_PURGE_KIND_PREFIX, Host: strings.ToLower("WWW.Example.com."), PathPrefix: "/a/", Revision: 2})
	waitFor(t, "purges applied", func() bool { return n.PurgeRevision() == 2 })
	if _, body := get("/b/1"); body != "v2 /b/1" {
		t.Errorf("after URL purge of http://www.example.com./b/1: %q, want v2", body)
	}
	if x, body := get("/a/1"); body != "v2 /a/1" {
		t.Errorf("after prefix purge of host www.example.com. /a/: %s %q, want v2", x, body)
	}
}

// A purge by cache key reaches a sliced object's slices, which are stored
// under the key and a slice's suffix: they were served whole after it.
func TestAKeyPurgeReachesTheSlices(t *testing.T) {
	o, origin := newSliceOrigin(t)
	const size = 200_000
	nodes, _ := startSlicedTrio(t, origin, 64<<10)
	path := "/s/keyed?size=" + fmt.Sprint(size)
	url := "http://" + nodes[0].ClientAddr().String() + path
	if resp, _ := do(t, http.MethodGet, url); resp.StatusCode != 200 || resp.Header.Get("Etag") != `"v1"` {
		t.Fatalf("first GET: %d %s", resp.StatusCode, resp.Header.Get("Etag"))
	}
	o.version.Store(2)
	key := "http127.0.0.1" + path
	for _, n := range nodes {
		n.ApplyPurges([]*pb.Purge{{Id: "key", Kind: pb.PurgeKind_PURGE_KIND_URL, Key: key, Revision: 1}}, func(*pb.PurgeResult) {})
	}
	for _, n := range nodes {
		waitFor(t, "bans swept", func() bool { return metricValue(t, n, "shardcache_purge_bans") == 0 })
	}
	resp, _ := do(t, http.MethodGet, url)
	if resp.Header.Get("Etag") != `"v2"` {
		t.Fatalf("GET after a purge of key %q on every node: %s %s (Cache-Status %v), want the new version v2",
			key, resp.Header.Get("X-Cache"), resp.Header.Get("Etag"), resp.Header.Values("Cache-Status"))
	}
}

// sieOrigin answers a first GET 200 (max-age=0, stale-if-error, an
// ETag, tagged), and a revalidation, once released, with a 500.
type sieOrigin struct {
	requests atomic.Int32
	reval    chan struct{}
	release  chan struct{}
}

func (o *sieOrigin) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	o.requests.Add(1)
	if r.Header.Get("If-None-Match") != "" {
		o.reval <- struct{}{}
		<-o.release
		http.Error(w, "down", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Cache-Control", "max-age=0, stale-if-error=3600")
	w.Header().Set("ETag", `"v1"`)
	w.Header().Set("Surrogate-Key", "sie-tag")
	fmt.Fprint(w, "v1 "+r.URL.Path)
}

// stale-if-error serves nothing a purge applied since has removed: not to
// the request whose revalidation began before the purge, nor to one after
// it that waited on that revalidation. Both were served the purged object.
func TestStaleIfErrorServesNothingPurged(t *testing.T) {
	o := &sieOrigin{reval: make(chan struct{}, 4), release: make(chan struct{})}
	osrv := httptest.NewServer(o)
	t.Cleanup(osrv.Close)
	fc, n := startOne(t, osrv.URL, noHotKeys)
	url := "http://" + n.ClientAddr().String() + "/sie/obj"
	if resp, body := do(t, "GET", url); resp.StatusCode != 200 || body != "v1 /sie/obj" {
		t.Fatalf("first GET: %d %q", resp.StatusCode, body)
	}
	type answer struct{ cache, body string }
	get := func(ch chan answer) {
		x, body, err := fetchAnswer(url)
		if err != nil {
			x = err.Error()
		}
		ch <- answer{x, body}
	}
	before := make(chan answer, 1)
	go get(before) // revalidates: the origin holds it
	<-o.reval
	fc.pushPurge(&pb.Purge{Id: "tag", Kind: pb.PurgeKind_PURGE_KIND_TAG, Tag: "sie-tag", Revision: 1})
	waitFor(t, "purge applied", func() bool { return n.PurgeRevision() == 1 })
	after := make(chan answer, 1)
	go get(after)
	waitFor(t, "the later request to wait on the revalidation or reach the origin", func() bool {
		return n.owner.Waiting() > 0 || len(o.reval) > 0 || o.requests.Load() > 2
	})
	close(o.release)
	b := <-before
	a := <-after
	t.Logf("request from before the purge: %s %q", b.cache, b.body)
	if a.cache == "STALE" || b.cache == "STALE" {
		t.Fatalf("after the acknowledged tag purge: %s %q, and the request from before it %s %q; want the purged object served stale to neither",
			a.cache, a.body, b.cache, b.body)
	}
}

// A URL purge reaches a sliced object's slices, for ranges and HEAD too.
func TestAURLPurgeReachesTheSlices(t *testing.T) {
	o, origin := newSliceOrigin(t)
	nodes, _ := startSlicedTrio(t, origin, 64<<10)
	path := "/s/u?size=200000"
	url := "http://" + nodes[1].ClientAddr().String() + path
	do(t, http.MethodGet, url)
	o.version.Store(2)
	for _, n := range nodes {
		n.ApplyPurges([]*pb.Purge{{Id: "u", Kind: pb.PurgeKind_PURGE_KIND_URL, Url: "http://127.0.0.1" + path, Revision: 1}}, func(*pb.PurgeResult) {})
	}
	if resp, _ := do(t, http.MethodGet, url, "Range", "bytes=70000-70010"); resp.Header.Get("Etag") != `"v2"` {
		t.Fatalf("range after URL purge: %s", resp.Header.Get("Etag"))
	}
	if resp, _ := do(t, http.MethodHead, url); resp.Header.Get("Etag") != `"v2"` {
		t.Fatalf("HEAD after URL purge: %s", resp.Header.Get("Etag"))
	}
}

// Hard URL and prefix purges drop a non-owner's hot copy.
func TestHardPurgesDropCopies(t *testing.T) {
	origin, ourl := newPurgeOrigin(t)
	fc, a, b := startPairOn(t, ourl)
	e := epochOf(1, a, b)
	p1, p2 := pathOwnedBy(t, e, "/c1/", "a"), pathOwnedBy(t, e, "/c2/", "a")
	for _, p := range []string{p1, p2} {
		do(t, "GET", "http://"+b.ClientAddr().String()+p)
		if resp, _ := do(t, "GET", "http://"+b.ClientAddr().String()+p); resp.Header.Get("X-Cache-Node") != "b" {
			t.Fatalf("no copy of %s at b", p)
		}
	}
	origin.gen.Store(2)
	fc.pushPurge(&pb.Purge{Id: "u", Kind: pb.PurgeKind_PURGE_KIND_URL, Url: "http://127.0.0.1" + p1, Revision: 1})
	fc.pushPurge(&pb.Purge{Id: "p", Kind: pb.PurgeKind_PURGE_KIND_PREFIX, PathPrefix: "/c2/", Revision: 2})
	waitFor(t, "applied", func() bool { return a.PurgeRevision() == 2 && b.PurgeRevision() == 2 })
	for _, p := range []string{p1, p2} {
		if _, body := do(t, "GET", "http://"+b.ClientAddr().String()+p); body != "v2 "+p {
			t.Errorf("%s via b after hard purge: %q", p, body)
		}
	}
}

// The escapes of a path and a query have one spelling (RFC 3986 6.2.2):
// /%7Euser and /~user, /caf%c3%a9 and /caf%C3%A9 are one key, which a URL
// purge of either spelling reaches. They were two, and a purge of one left
// the other served.
func TestEscapesHaveOneSpelling(t *testing.T) {
	origin, ourl := newPurgeOrigin(t)
	fc, n := startOne(t, ourl, noHotKeys)
	base := "http://" + n.ClientAddr().String()
	cases := []struct{ purged, other string }{
		{"/caf%C3%A9/menu", "/caf%c3%a9/menu"},
		{"/~user/page", "/%7Euser/page"},
		{"/q?a=%7e&b=%2f", "/q?a=~&b=%2F"},
	}
	for _, c := range cases {
		do(t, "GET", base+c.other)
		if resp, body := do(t, "GET", base+c.purged); resp.Header.Get("X-Cache") != "HIT" {
			t.Fatalf("GET %s after GET %s: %s %q, want the same object, a hit", c.purged, c.other, resp.Header.Get("X-Cache"), body)
		}
	}
	origin.gen.Store(2)
	for i, c := range cases {
		fc.pushPurge(&pb.Purge{Id: fmt.Sprint("u", i), Kind: pb.PurgeKind_PURGE_KIND_URL, Url: "http://127.0.0.1" + c.purged, Revision: int64(i + 1)})
	}
	waitFor(t, "the purges applied", func() bool { return n.PurgeRevision() == int64(len(cases)) })
	for _, c := range cases {
		if resp, body := do(t, "GET", base+c.other); strings.HasPrefix(body, "v1 ") {
			t.Errorf("GET %s after the URL purge of http://127.0.0.1%s: %s %q", c.other, c.purged, resp.Header.Get("X-Cache"), body)
		}
	}
}
