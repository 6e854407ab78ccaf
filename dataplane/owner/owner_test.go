package owner

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/shardcache/shardcache/dataplane/hop"
	"github.com/shardcache/shardcache/dataplane/httpcache"
	"github.com/shardcache/shardcache/dataplane/internal/tasks"
	"github.com/shardcache/shardcache/dataplane/metrics"
	"github.com/shardcache/shardcache/dataplane/purge"
	"github.com/shardcache/shardcache/dataplane/routes"
	"github.com/shardcache/shardcache/dataplane/store"
	pb "github.com/shardcache/shardcache/proto/shardcache/v1"
	"github.com/shardcache/shardcache/sdk/policy"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fakeOrigin is an Origin that answers from handler, as the origin's
// client would send it the request (the fill's extra fields set), and
// records every request.
type fakeOrigin struct {
	mu      sync.Mutex
	handler http.HandlerFunc
	seen    []*http.Request
	err     error // when set, every fetch fails with it
}

func (o *fakeOrigin) Fetch(ctx context.Context, r *http.Request, p *policy.Policy, fill bool, extra http.Header) (*http.Response, error) {
	req := r.Clone(ctx)
	if fill {
		req.Method = http.MethodGet
		for _, f := range httpcache.ConditionalFields {
			req.Header.Del(f)
		}
	}
	for k, v := range extra {
		req.Header[k] = v
	}
	o.mu.Lock()
	o.seen = append(o.seen, req)
	err, h := o.err, o.handler
	o.mu.Unlock()
	if err != nil {
		return nil, err
	}
	rec := httptest.NewRecorder()
	h(rec, req)
	resp := rec.Result()
	resp.ContentLength = -1
	if cl := rec.Header().Get("Content-Length"); cl != "" {
		fmt.Sscan(cl, &resp.ContentLength)
	}
	return resp, nil
}

func (o *fakeOrigin) requests() []*http.Request {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]*http.Request(nil), o.seen...)
}

// fakePeers is a Peers that answers from handler, and records the peer
// addresses asked.
type fakePeers struct {
	mu      sync.Mutex
	handler func(addr string, r *http.Request, h http.Header) (*http.Response, error)
	asked   []string
}

func (p *fakePeers) Forward(ctx context.Context, addr string, r *http.Request, h http.Header) (*http.Response, error) {
	p.mu.Lock()
	p.asked = append(p.asked, addr)
	handler := p.handler
	p.mu.Unlock()
	if handler == nil {
		return nil, errors.New("no peer")
	}
	return handler(addr, r, h)
}

// testOwner is an Owner over a real store in a temporary directory.
type testOwner struct {
	*Owner
	origin *fakeOrigin
	peers  *fakePeers
	store  *store.Store
	bans   *purge.Set
	tasks  *tasks.Group
	cut    atomic.Bool
}

func newTestOwner(t *testing.T, origin http.HandlerFunc, opts ...func(*Config)) *testOwner {
	t.Helper()
	st, err := store.Open(store.Config{Dir: t.TempDir(), DiskBytes: 64 << 20, MemoryBytes: 8 << 20, MemoryMaxObject: 64 << 10,
		AdmissionPeriod: -1, Group: httpcache.VariantOf, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	<-st.Ready()
	copies, err := store.NewMemory(4 << 20)
	if err != nil {
		t.Fatal(err)
	}
	to := &testOwner{origin: &fakeOrigin{handler: origin}, peers: &fakePeers{}, store: st, bans: purge.New(),
		tasks: tasks.New(func(task string, v any, _ []byte) { t.Errorf("task %s panicked: %v", task, v) })}
	var rts atomic.Pointer[routes.Table]
	var ps atomic.Pointer[policy.Set]
	ps.Store(policy.Empty)
	cfg := Config{ID: "a", OriginTimeout: 5 * time.Second, RelayTimeout: 6 * time.Second, HandoffWindow: time.Minute,
		MaxObjectBytes: 16 << 20, DiskBytes: 64 << 20, Store: st, Copies: copies, CopyMaxObject: 1 << 20,
		Origin: to.origin, Peers: to.peers, Routes: &rts, Policies: &ps, Bans: to.bans, Inflight: &purge.Inflight{},
		Metrics: metrics.New(), Tasks: to.tasks, Logger: slog.New(slog.DiscardHandler),
		CutOff: func(now time.Time) (time.Time, bool) { return now, to.cut.Load() }}
	for _, o := range opts {
		o(&cfg)
	}
	to.Owner = New(cfg)
	to.CaughtUp()
	t.Cleanup(func() {
		to.tasks.Stop()
		copies.Close()
		st.Close()
	})
	return to
}

// request is a GET of path (a URL under http://www.example.com) with
// header pairs, under p (nil: the default policy).
func request(path string, p *policy.Policy, header ...string) *Request {
	u, _ := url.ParseRequestURI(path)
	r := httptest.NewRequest(http.MethodGet, "http://www.example.com"+path, nil)
	r.URL = u
	for i := 0; i+1 < len(header); i += 2 {
		r.Header.Add(header[i], header[i+1])
	}
	if p == nil {
		p = policy.Default
	}
	return &Request{HTTP: r, Key: p.Key("http", r), Policy: p, Now: time.Now()}
}

// serve serves req and returns the recorded answer and the outcome; the
// fill's background copy is awaited, so that the store holds what it
// stores.
func (to *testOwner) serve(req *Request) (*httptest.ResponseRecorder, Outcome) {
	w := httptest.NewRecorder()
	out := to.Serve(w, *req)
	to.settled()
	return w, out
}

// settled waits until no fill runs.
func (to *testOwner) settled() {
	for to.cfg.Inflight.StartedBefore(math.MaxInt64) {
		time.Sleep(time.Millisecond)
	}
}

// cacheable answers body with max-age=60, an ETag, and counts nothing.
func cacheable(body string, kv ...string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "public, max-age=60")
		w.Header().Set("ETag", `"v1"`)
		for i := 0; i+1 < len(kv); i += 2 {
			w.Header().Set(kv[i], kv[i+1])
		}
		if r.Header.Get("If-None-Match") == `"v1"` {
			w.WriteHeader(http.StatusNotModified)
			return
		}
		w.Header().Set("Content-Length", fmt.Sprint(len(body)))
		io.WriteString(w, body)
	}
}

func policyOf(t *testing.T, cp *pb.CachePolicy) *policy.Policy {
	t.Helper()
	p, err := policy.Compile(cp)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// A miss is filled from the origin and stored; the next request is a hit
// from memory; a large object is a hit from disk. Each outcome says so.
func TestMissThenHitFromMemoryAndDisk(t *testing.T) {
	// Random, so that stored compressed it is still larger than the
	// memory tier takes.
	raw := make([]byte, 200<<10)
	rand.NewChaCha8([32]byte{1}).Read(raw)
	big := string(raw)
	to := newTestOwner(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/big" {
			cacheable(big)(w, r)
			return
		}
		cacheable("small body")(w, r)
	})
	for _, tt := range []struct {
		path, cache, source, body string
	}{
		{"/small", httpcache.CacheMiss, SourceOrigin, "small body"},
		{"/small", httpcache.CacheHit, SourceMemory, "small body"},
		{"/big", httpcache.CacheMiss, SourceOrigin, big},
		{"/big", httpcache.CacheHit, SourceDisk, big},
	} {
		w, out := to.serve(request(tt.path, nil))
		if w.Code != 200 || w.Body.String() != tt.body || w.Header().Get("X-Cache") != tt.cache {
			t.Fatalf("%s: %d %s %q…", tt.path, w.Code, w.Header().Get("X-Cache"), w.Body.String()[:min(10, w.Body.Len())])
		}
		if !out.Served || out.Member.Cache != tt.cache || out.Source != tt.source || !out.Kept() || out.Node != "a" {
			t.Fatalf("%s %s: outcome %+v", tt.path, tt.cache, out)
		}
		if cs := w.Header().Get("Cache-Status"); !strings.HasPrefix(cs, "a;") {
			t.Fatalf("%s: Cache-Status %q", tt.path, cs)
		}
	}
	if n := len(to.origin.requests()); n != 2 {
		t.Fatalf("%d origin requests, want 2", n)
	}
}

// A stored response past its freshness is revalidated with its ETag: a
// 304 refreshes it (REVALIDATED), a 200 replaces it (EXPIRED).
func TestRevalidation(t *testing.T) {
	version := atomic.Value{}
	version.Store(`"v1"`)
	to := newTestOwner(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=0")
		w.Header().Set("ETag", version.Load().(string))
		if r.Header.Get("If-None-Match") == version.Load().(string) {
			w.WriteHeader(http.StatusNotModified)
			return
		}
		io.WriteString(w, "body "+version.Load().(string))
	})
	to.serve(request("/r", nil))
	w, out := to.serve(request("/r", nil))
	if w.Header().Get("X-Cache") != httpcache.CacheRevalidated || out.Member.Status != http.StatusNotModified || w.Body.String() != `body "v1"` {
		t.Fatalf("after a 304: %s %+v %q", w.Header().Get("X-Cache"), out.Member, w.Body.String())
	}
	if inm := to.origin.requests()[1].Header.Get("If-None-Match"); inm != `"v1"` {
		t.Fatalf("the revalidation sent If-None-Match %q", inm)
	}
	version.Store(`"v2"`)
	w, _ = to.serve(request("/r", nil))
	if w.Header().Get("X-Cache") != httpcache.CacheExpired || w.Body.String() != `body "v2"` {
		t.Fatalf("after a new version: %s %q", w.Header().Get("X-Cache"), w.Body.String())
	}
}

// The origin failing: a stored response within stale-if-error is served
// STALE; without one the answer is 502 with Proxy-Status, and the outcome
// has no source.
func TestOriginFailures(t *testing.T) {
	to := newTestOwner(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=0, stale-if-error=600")
		w.Header().Set("ETag", `"v1"`)
		io.WriteString(w, "kept")
	})
	to.serve(request("/s", nil))
	to.origin.mu.Lock()
	to.origin.err = errors.New("connection refused")
	to.origin.mu.Unlock()
	w, out := to.serve(request("/s", nil))
	if w.Header().Get("X-Cache") != httpcache.CacheStale || w.Body.String() != "kept" || out.Member.Cache != httpcache.CacheStale {
		t.Fatalf("stale-if-error: %s %q %+v", w.Header().Get("X-Cache"), w.Body.String(), out)
	}
	w, out = to.serve(request("/never", nil))
	if w.Code != http.StatusBadGateway || !strings.Contains(w.Header().Get("Proxy-Status"), "error=") || out.Source != "" {
		t.Fatalf("no stored response: %d %q %+v", w.Code, w.Header().Get("Proxy-Status"), out)
	}
	w, _ = to.serve(request("/never", nil, "Cache-Control", "only-if-cached"))
	if w.Code != http.StatusGatewayTimeout {
		t.Fatalf("only-if-cached, nothing stored: %d", w.Code)
	}
}

// Concurrent misses of a key collapse into one origin request; the others
// are answered from its fill (X-Cache HIT, Cache-Status collapsed).
func TestConcurrentMissesCollapse(t *testing.T) {
	release := make(chan struct{})
	var calls atomic.Int32
	to := newTestOwner(t, func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		<-release
		cacheable("shared")(w, r)
	})
	var wg sync.WaitGroup
	outs := make(chan Outcome, 8)
	for range 8 {
		wg.Go(func() {
			w := httptest.NewRecorder()
			outs <- to.Serve(w, *request("/c", nil))
			if w.Body.String() != "shared" {
				t.Errorf("body %q", w.Body.String())
			}
		})
	}
	for to.Waiting() < 7 {
		time.Sleep(time.Millisecond)
	}
	close(release)
	wg.Wait()
	close(outs)
	to.settled()
	collapsed := 0
	for out := range outs {
		if out.Member.Cache == cacheCollapsed {
			collapsed++
		}
	}
	if calls.Load() != 1 || collapsed != 7 {
		t.Fatalf("%d origin requests, %d collapsed; want 1 and 7", calls.Load(), collapsed)
	}
}

// A response that varies on Accept is stored per variant; the policy's
// max_variants bounds them, a variant past it is answered unstored.
func TestVariantsAndTheirBound(t *testing.T) {
	to := newTestOwner(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Vary", "Accept")
		cacheable("as "+r.Header.Get("Accept"))(w, r)
	})
	p := policyOf(t, &pb.CachePolicy{Name: "v", MaxVariants: 2})
	for _, tt := range []struct{ accept, cache string }{
		{"a/a", httpcache.CacheMiss}, {"b/b", httpcache.CacheMiss}, {"a/a", httpcache.CacheHit},
		{"c/c", httpcache.CacheMiss}, {"c/c", httpcache.CacheMiss}, {"b/b", httpcache.CacheHit},
	} {
		w, out := to.serve(request("/v", p, "Accept", tt.accept))
		if w.Body.String() != "as "+tt.accept || w.Header().Get("X-Cache") != tt.cache {
			t.Fatalf("Accept %s: %s %q, want %s", tt.accept, w.Header().Get("X-Cache"), w.Body.String(), tt.cache)
		}
		if tt.accept == "c/c" && out.Kept() {
			t.Fatalf("a variant past max_variants was kept: %+v", out)
		}
	}
}

// Ranges of a stored 200: one range, several (multipart), and one past the
// end (416).
func TestRangesOfAStoredResponse(t *testing.T) {
	to := newTestOwner(t, cacheable("0123456789"))
	to.serve(request("/rg", nil))
	w, _ := to.serve(request("/rg", nil, "Range", "bytes=2-4"))
	if w.Code != http.StatusPartialContent || w.Body.String() != "234" || w.Header().Get("Content-Range") != "bytes 2-4/10" {
		t.Fatalf("one range: %d %q %q", w.Code, w.Body.String(), w.Header().Get("Content-Range"))
	}
	w, _ = to.serve(request("/rg", nil, "Range", "bytes=0-1,8-9"))
	if w.Code != http.StatusPartialContent || !strings.HasPrefix(w.Header().Get("Content-Type"), "multipart/byteranges") ||
		!strings.Contains(w.Body.String(), "01") || !strings.Contains(w.Body.String(), "89") {
		t.Fatalf("two ranges: %d %q", w.Code, w.Header().Get("Content-Type"))
	}
	w, _ = to.serve(request("/rg", nil, "Range", "bytes=50-60"))
	if w.Code != http.StatusRequestedRangeNotSatisfiable || w.Header().Get("Content-Range") != "bytes */10" {
		t.Fatalf("past the end: %d %q", w.Code, w.Header().Get("Content-Range"))
	}
	w, _ = to.serve(request("/rg", nil, "If-None-Match", `"v1"`))
	if w.Code != http.StatusNotModified {
		t.Fatalf("a matching If-None-Match: %d", w.Code)
	}
}

// A response the store may not keep is passed on as it came, its outcome
// not kept; a range of it is cut from it.
func TestAnUnstorableResponseIsPassedOn(t *testing.T) {
	to := newTestOwner(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-store")
		w.Header().Set("Content-Length", "10")
		io.WriteString(w, "abcdefghij")
	})
	w, out := to.serve(request("/ns", nil))
	if w.Body.String() != "abcdefghij" || out.Kept() || out.Source != SourceOrigin || out.Member.Status != 200 {
		t.Fatalf("no-store: %q %+v", w.Body.String(), out)
	}
	w, _ = to.serve(request("/ns", nil, "Range", "bytes=3-5"))
	if w.Code != http.StatusPartialContent || w.Body.String() != "def" {
		t.Fatalf("a range of an unstored answer: %d %q", w.Code, w.Body.String())
	}
	if n := len(to.origin.requests()); n != 2 {
		t.Fatalf("%d origin requests, want 2: nothing stored", n)
	}
}

// A stored response purged by a ban is not served; one stored before a
// cut-off from the control plane is revalidated first.
func TestBansAndCutOff(t *testing.T) {
	to := newTestOwner(t, cacheable("x"))
	to.serve(request("/b", nil))
	ban, err := purge.NewBan(&pb.Purge{Id: "p1", Kind: pb.PurgeKind_PURGE_KIND_URL, Url: "http://www.example.com/b", Revision: 1}, time.Now().UnixNano())
	if err != nil {
		t.Fatal(err)
	}
	to.bans.Add(ban, 1)
	if w, _ := to.serve(request("/b", nil)); w.Header().Get("X-Cache") != httpcache.CacheMiss {
		t.Fatalf("after a purge: %s, want MISS", w.Header().Get("X-Cache"))
	}
	to.cut.Store(true) // the bound is now: every entry is older
	if w, _ := to.serve(request("/b", nil)); w.Header().Get("X-Cache") != httpcache.CacheRevalidated {
		t.Fatalf("cut off: %s, want REVALIDATED", w.Header().Get("X-Cache"))
	}
}

// A textual response is stored compressed, sent coded to a client that
// accepts zstd and decoded for one that does not.
func TestCompressedStorage(t *testing.T) {
	text := strings.Repeat("compressible text ", 200)
	to := newTestOwner(t, cacheable(text, "Content-Type", "text/plain"))
	p := policyOf(t, &pb.CachePolicy{Name: "z"})
	to.serve(request("/z", p))
	w, _ := to.serve(request("/z", p))
	if w.Body.String() != text || w.Header().Get("Content-Encoding") != "" {
		t.Fatalf("a client without zstd got %q coded %q", w.Body.String()[:10], w.Header().Get("Content-Encoding"))
	}
	w, _ = to.serve(request("/z", p, "Accept-Encoding", "zstd"))
	if w.Header().Get("Content-Encoding") != "zstd" || w.Body.Len() >= len(text) {
		t.Fatalf("a zstd client: coded %q, %d bytes", w.Header().Get("Content-Encoding"), w.Body.Len())
	}
}

// A hot copy: Keep answers from the owner's relayed answer and keeps a
// copy; a Copy request is answered from it while fresh, but not for a
// request that asks the owner (no-cache), and DropCopies forgets it.
func TestHotCopies(t *testing.T) {
	to := newTestOwner(t, cacheable("unused"))
	req := request("/hot", nil)
	resp := &http.Response{StatusCode: 200, Header: http.Header{"Cache-Control": {"max-age=60"}, "X-Cache": {"HIT"}, hop.PurgeRevisionField: {"0"},
		"X-Cache-Node": {"o"}, "Cache-Status": {"o; hit; ttl=60"}}, ContentLength: 4,
		Body: io.NopCloser(strings.NewReader("copy"))}
	w := httptest.NewRecorder()
	if !to.Keep(w, *req, resp, true) || w.Body.String() != "copy" {
		t.Fatalf("Keep: %q", w.Body.String())
	}
	for range 10 { // the memory tier takes a copy a little later
		if _, ok := to.cfg.Copies.Get(req.Key); ok {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	copyReq := request("/hot", nil)
	copyReq.Copy = true
	w, out := to.serve(copyReq)
	if !out.Served || w.Body.String() != "copy" || out.Member.Cache != httpcache.CacheHit {
		t.Fatalf("from the copy: %+v %q", out, w.Body.String())
	}
	noCache := request("/hot", nil, "Cache-Control", "no-cache")
	noCache.Copy = true
	if _, out := to.serve(noCache); out.Served {
		t.Fatal("a no-cache request was answered from the copy")
	}
	to.DropCopies([]string{req.Key})
	if _, out := to.serve(copyReq); out.Served {
		t.Fatal("a dropped copy answered")
	}
	vary := &http.Response{StatusCode: 200, Header: http.Header{"Cache-Control": {"max-age=60"}, "Vary": {"Accept"}, hop.PurgeRevisionField: {"0"}}, ContentLength: 1,
		Body: io.NopCloser(strings.NewReader("v"))}
	if to.Keep(httptest.NewRecorder(), *req, vary, true) {
		t.Fatal("a varying answer was kept as a copy")
	}
}

// Invalidate drops the URL's stored response here.
func TestInvalidate(t *testing.T) {
	to := newTestOwner(t, cacheable("x"))
	to.serve(request("/inv", nil))
	req := request("/inv", nil)
	req.HTTP.Method = http.MethodPost
	to.Invalidate(*req, http.Header{})
	if w, _ := to.serve(request("/inv", nil)); w.Header().Get("X-Cache") != httpcache.CacheMiss {
		t.Fatalf("after the invalidation: %s, want MISS", w.Header().Get("X-Cache"))
	}
	to.serve(request("/inv", nil))
	peer := request("/inv", nil)
	peer.Hop.From = "b"
	to.Invalidate(*peer, nil)
	if w, _ := to.serve(request("/inv", nil)); w.Header().Get("X-Cache") != httpcache.CacheMiss {
		t.Fatalf("after a peer's invalidation: %s, want MISS", w.Header().Get("X-Cache"))
	}
}

// Under authorize_every_request every use asks the origin with the
// client's credentials; a refusal says MISS, stored or not.
func TestAuthorizeEveryRequest(t *testing.T) {
	to := newTestOwner(t, func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer ok" {
			http.Error(w, "no", http.StatusUnauthorized)
			return
		}
		cacheable("private")(w, r)
	})
	p := policyOf(t, &pb.CachePolicy{Name: "auth", AuthorizeEveryRequest: true})
	if w, _ := to.serve(request("/a", p, "Authorization", "Bearer ok")); w.Body.String() != "private" {
		t.Fatalf("authorised: %q", w.Body.String())
	}
	w, _ := to.serve(request("/a", p, "Authorization", "Bearer ok"))
	if w.Header().Get("X-Cache") != httpcache.CacheRevalidated {
		t.Fatalf("authorised again: %s, want REVALIDATED", w.Header().Get("X-Cache"))
	}
	w, out := to.serve(request("/a", p, "Authorization", "Bearer bad"))
	if w.Code != http.StatusUnauthorized || w.Header().Get("X-Cache") != httpcache.CacheMiss || out.Kept() {
		t.Fatalf("refused: %d %s %+v", w.Code, w.Header().Get("X-Cache"), out)
	}
}

// A hot key's later owner fills from its first owner, not the origin; a
// new owner within the handoff window asks the key's previous owner.
func TestFillsFromPeers(t *testing.T) {
	to := newTestOwner(t, cacheable("from the origin"))
	to.peers.handler = func(addr string, r *http.Request, h http.Header) (*http.Response, error) {
		if addr == "10.0.0.9:1" && h.Get("Cache-Control") == "only-if-cached" {
			return nil, errors.New("handoff target has nothing")
		}
		return &http.Response{StatusCode: 200, Header: http.Header{"Cache-Control": {"max-age=60"}, "Etag": {`"p"`}, hop.PurgeRevisionField: {"0"}}, ContentLength: 9,
			Body: io.NopCloser(strings.NewReader("from peer"))}, nil
	}
	req := request("/replica", nil)
	req.From = &pb.Member{Id: "b", PeerAddress: "10.0.0.2:1"}
	w, out := to.serve(req)
	if w.Body.String() != "from peer" || out.Source != SourcePeer || len(to.origin.requests()) != 0 {
		t.Fatalf("a replica's fill: %q %+v, %d origin requests", w.Body.String(), out, len(to.origin.requests()))
	}
	prev, _ := routes.New(&pb.RingEpoch{Epoch: 1, Members: []*pb.Member{{Id: "b", PeerAddress: "10.0.0.2:1"}}})
	rt, _ := routes.New(&pb.RingEpoch{Epoch: 2, Members: []*pb.Member{{Id: "a", PeerAddress: "10.0.0.1:1"}, {Id: "b", PeerAddress: "10.0.0.2:1"}}})
	rt.Prev, rt.Applied = prev, time.Now()
	handed := request("/handed", nil)
	handed.Routes = rt
	if w, _ := to.serve(handed); w.Body.String() != "from peer" {
		t.Fatalf("a handoff: %q", w.Body.String())
	}
	if len(to.origin.requests()) != 0 {
		t.Fatal("a handoff went to the origin")
	}
	// A first owner that answers from a stale copy (served while it
	// revalidates, as after a soft purge) is not taken as fresh, nor is
	// the origin asked a second time: its answer is passed on, unstored.
	to.peers.handler = func(addr string, r *http.Request, h http.Header) (*http.Response, error) {
		return &http.Response{StatusCode: 200, Header: http.Header{"Cache-Control": {"max-age=60"}, "X-Cache": {httpcache.CacheUpdating}, hop.PurgeRevisionField: {"0"}},
			ContentLength: 9, Body: io.NopCloser(strings.NewReader("old copy!"))}, nil
	}
	stale := func() *Request {
		req := request("/replica-stale", nil)
		req.From = &pb.Member{Id: "b", PeerAddress: "10.0.0.2:1"}
		return req
	}
	for range 2 {
		w, out := to.serve(stale())
		if w.Body.String() != "old copy!" || w.Header().Get("X-Cache") != httpcache.CacheUpdating || out.Source != SourcePeer || out.Kept() || out.Member.Cache != httpcache.CacheMiss {
			t.Fatalf("a replica's fill from a stale copy: %q %s %+v", w.Body.String(), w.Header().Get("X-Cache"), out)
		}
	}
	// A first owner behind on purges is not asked again: the origin is.
	to.peers.handler = func(addr string, r *http.Request, h http.Header) (*http.Response, error) {
		return &http.Response{StatusCode: 200, Header: http.Header{"Cache-Control": {"max-age=60"}}, ContentLength: 9, Body: io.NopCloser(strings.NewReader("no revision"))}, nil
	}
	if w, out := to.serve(stale()); w.Body.String() != "from the origin" || out.Source != SourceOrigin || len(to.origin.requests()) != 1 {
		t.Fatalf("a replica's fill from a peer behind on purges: %q %+v, %d origin requests", w.Body.String(), out, len(to.origin.requests()))
	}
}

// A sliced object is assembled from its slices, served in process when
// this node owns them (no ring), and answered whole and by range.
func TestSlicedObjects(t *testing.T) {
	body := strings.Repeat("0123456789", 20000) // 200,000 bytes: four slices of 64 KiB
	to := newTestOwner(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=60")
		w.Header().Set("ETag", `"s1"`)
		http.ServeContent(w, r, "", time.Time{}, strings.NewReader(body))
	})
	p := policyOf(t, &pb.CachePolicy{Name: "sl", SliceSize: policy.MinSliceSize})
	req := request("/sl", p)
	req.Assemble = true
	w, out := to.serve(req)
	if !out.Served || w.Body.String() != body || out.Source != SourceSlices {
		t.Fatalf("assembled: %+v, %d bytes", out, w.Body.Len())
	}
	ranged := request("/sl", p, "Range", "bytes=70000-70009")
	ranged.Assemble = true
	w, _ = to.serve(ranged)
	if w.Code != http.StatusPartialContent || w.Body.String() != body[70000:70010] || w.Header().Get("X-Cache") != httpcache.CacheHit {
		t.Fatalf("a range of it: %d %q %s", w.Code, w.Body.String(), w.Header().Get("X-Cache"))
	}
}

// Partial content: a Range miss under partial_content stores the 206 as
// the key's part; a range inside it is a hit; one past it asks the origin
// for the missing bytes only and joins them.
func TestPartialContentParts(t *testing.T) {
	body := "0123456789abcdefghij"
	to := newTestOwner(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=60")
		w.Header().Set("ETag", `"p1"`)
		http.ServeContent(w, r, "", time.Time{}, strings.NewReader(body))
	})
	p := policyOf(t, &pb.CachePolicy{Name: "pc", PartialContent: true})
	if w, _ := to.serve(request("/pc", p, "Range", "bytes=0-9")); w.Code != http.StatusPartialContent || w.Body.String() != body[:10] {
		t.Fatalf("the first range: %d %q", w.Code, w.Body.String())
	}
	if w, _ := to.serve(request("/pc", p, "Range", "bytes=2-5")); w.Body.String() != body[2:6] || w.Header().Get("X-Cache") != httpcache.CacheHit {
		t.Fatalf("inside the part: %s %q", w.Header().Get("X-Cache"), w.Body.String())
	}
	if w, _ := to.serve(request("/pc", p, "Range", "bytes=8-14")); w.Body.String() != body[8:15] {
		t.Fatalf("past the part: %q", w.Body.String())
	}
	seen := to.origin.requests()
	if got := seen[len(seen)-1].Header.Get("Range"); got != "bytes=10-14" || seen[len(seen)-1].Header.Get("If-Range") != `"p1"` {
		t.Fatalf("the origin was asked for %q (If-Range %q), want the missing bytes 10-14", got, seen[len(seen)-1].Header.Get("If-Range"))
	}
}

// Within stale-while-revalidate a stale response is served UPDATING and
// refreshed in the background: the next request gets the new version.
func TestStaleWhileRevalidate(t *testing.T) {
	var calls atomic.Int32
	to := newTestOwner(t, func(w http.ResponseWriter, r *http.Request) {
		n := calls.Add(1)
		w.Header().Set("Cache-Control", "max-age=0, stale-while-revalidate=600")
		w.Header().Set("ETag", fmt.Sprintf(`"v%d"`, n))
		fmt.Fprintf(w, "v%d", n)
	})
	to.serve(request("/swr", nil))
	w, out := to.serve(request("/swr", nil))
	if out.Member.Cache != httpcache.CacheUpdating || w.Body.String() != "v1" {
		t.Fatalf("within stale-while-revalidate: %+v %q", out, w.Body.String())
	}
	for deadline := time.Now().Add(10 * time.Second); calls.Load() < 2; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no background refresh")
		}
	}
	to.settled()
	if w, _ := to.serve(request("/swr", nil)); w.Body.String() != "v2" {
		t.Fatalf("after the refresh: %q, want v2", w.Body.String())
	}
}

// A 5xx of the origin to a revalidation without stale-if-error is passed
// on; to a miss, it is passed on unstored.
func TestOriginErrorsArePassedOn(t *testing.T) {
	var fail atomic.Bool
	to := newTestOwner(t, func(w http.ResponseWriter, r *http.Request) {
		if fail.Load() {
			http.Error(w, "down", http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Cache-Control", "max-age=0, must-revalidate")
		w.Header().Set("ETag", `"e"`)
		io.WriteString(w, "ok")
	})
	to.serve(request("/e", nil))
	fail.Store(true)
	if w, _ := to.serve(request("/e", nil)); w.Code != http.StatusServiceUnavailable {
		t.Fatalf("a revalidation's 503: %d", w.Code)
	}
	if w, out := to.serve(request("/e2", nil)); w.Code != http.StatusServiceUnavailable || out.Kept() {
		t.Fatalf("a miss's 503: %d %+v", w.Code, out)
	}
}

// A pre-copy takes the hot keys a ring change gave this node from their
// previous owners, and never asks the origin.
func TestPrecopyTakesGainedHotKeysFromTheirPreviousOwners(t *testing.T) {
	to := newTestOwner(t, cacheable("from the origin"))
	key := "httpwww.example.com/pre"
	to.peers.handler = func(addr string, r *http.Request, h http.Header) (*http.Response, error) {
		if h.Get(hop.HotKeysField) != "" {
			return &http.Response{StatusCode: 200, Body: io.NopCloser(strings.NewReader(
				`[{"key":"` + key + `","host":"www.example.com","uri":"/pre","rate":100}]`))}, nil
		}
		return &http.Response{StatusCode: 200, Header: http.Header{"Cache-Control": {"max-age=60"}, hop.PurgeRevisionField: {"0"}},
			ContentLength: 6, Body: io.NopCloser(strings.NewReader("handed"))}, nil
	}
	// A ring where this node owns the key now, and another did before.
	var members []*pb.Member
	for i := range 8 {
		members = append(members, &pb.Member{Id: fmt.Sprintf("n%d", i), PeerAddress: fmt.Sprintf("10.0.0.%d:1", i)})
	}
	prev, _ := routes.New(&pb.RingEpoch{Epoch: 1, Members: members})
	for i := range 100 {
		rt, _ := routes.New(&pb.RingEpoch{Epoch: 2, Members: append(members, &pb.Member{Id: "a", PeerAddress: fmt.Sprintf("10.0.1.%d:1", i)})})
		if rt.Owner(key).GetId() == "a" {
			rt.Prev, rt.Applied = prev, time.Now()
			to.Precopy(rt)
			break
		}
	}
	to.settled()
	if e, ok := to.store.Peek(key); !ok || e.Status != 200 {
		t.Fatal("the gained hot key was not pre-copied")
	}
	if n := len(to.origin.requests()); n != 0 {
		t.Fatalf("a pre-copy asked the origin %d times", n)
	}
}

// TestAnObjectNotKeptAtItsEndSaysSo: a response of unknown length is
// streamed to its client as it is stored; one that outgrows the policy's
// largest object is not kept, and though its header said stored, its
// outcome (what the access log and the notes read) says it was not, and
// why. The next request fetches it again.
func TestAnObjectNotKeptAtItsEndSaysSo(t *testing.T) {
	body := strings.Repeat("x", 3<<20)
	to := newTestOwner(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "public, max-age=60")
		w.Header().Set("Content-Type", "application/octet-stream") // not compressed
		io.WriteString(w, body)                                    // no Content-Length: its size is known at its end
	})
	p := policyOf(t, &pb.CachePolicy{Name: "small", PathPrefix: "/", MaxObjectSize: 1 << 20})
	for i := range 2 {
		w, out := to.serve(request("/big", p))
		if w.Body.Len() != len(body) {
			t.Fatalf("request %d: %d bytes, want %d", i, w.Body.Len(), len(body))
		}
		if !strings.Contains(w.Header().Get("Cache-Status"), "stored") {
			t.Fatalf("request %d: Cache-Status %q: the header goes out before the end", i, w.Header().Get("Cache-Status"))
		}
		if out.Kept() || out.Member.Detail != httpcache.ReasonTooLarge {
			t.Fatalf("request %d: outcome %+v, want not kept, %s", i, out.Member, httpcache.ReasonTooLarge)
		}
	}
	if n := len(to.origin.requests()); n != 2 {
		t.Fatalf("%d origin requests, want 2: nothing was kept", n)
	}
	if note, _ := to.Note(request("/big", p).Key); note.Reason != httpcache.ReasonTooLarge || note.Stored {
		t.Fatalf("noted %+v", note)
	}
}
