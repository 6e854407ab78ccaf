package front

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/shardcache/shardcache/dataplane/hop"
	"github.com/shardcache/shardcache/dataplane/hotkey"
	"github.com/shardcache/shardcache/dataplane/httpcache"
	"github.com/shardcache/shardcache/dataplane/internal/sketch"
	"github.com/shardcache/shardcache/dataplane/internal/tasks"
	"github.com/shardcache/shardcache/dataplane/logstream"
	"github.com/shardcache/shardcache/dataplane/metrics"
	"github.com/shardcache/shardcache/dataplane/owner"
	"github.com/shardcache/shardcache/dataplane/relay"
	"github.com/shardcache/shardcache/dataplane/routes"
	pb "github.com/shardcache/shardcache/proto/shardcache/v1"
	"github.com/shardcache/shardcache/sdk/policy"
)

// fakeOwner is an Owner that answers every request with its key, and
// records what it was asked.
type fakeOwner struct {
	mu          sync.Mutex
	served      []owner.Request
	kept        int // hot answers offered for a copy
	keptCold    int // answers of keys not hot offered for a copy
	invalidated []owner.Request
	copies      bool // a Copy request is served
	sliced      bool // an Assemble request is served
}

func (o *fakeOwner) Serve(w http.ResponseWriter, req owner.Request) owner.Outcome {
	o.mu.Lock()
	o.served = append(o.served, req)
	copies, sliced := o.copies, o.sliced
	o.mu.Unlock()
	if req.Copy && !copies || req.Assemble && !sliced {
		return owner.Outcome{}
	}
	w.Header().Set("X-Cache", httpcache.CacheHit)
	io.WriteString(w, "owner:"+req.Key)
	return owner.Outcome{Served: true, Source: owner.SourceMemory, Node: "a",
		Member: httpcache.StatusMember{Node: "a", Cache: httpcache.CacheHit, TTL: time.Minute, HasTTL: true}}
}

func (o *fakeOwner) Keep(w http.ResponseWriter, req owner.Request, resp *http.Response, hot bool) bool {
	o.mu.Lock()
	if hot {
		o.kept++
	} else {
		o.keptCold++
	}
	o.mu.Unlock()
	return false
}

func (o *fakeOwner) HasCopy(string) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.copies
}

func (o *fakeOwner) Invalidate(req owner.Request, h http.Header) {
	o.mu.Lock()
	o.invalidated = append(o.invalidated, req)
	o.mu.Unlock()
}

func (o *fakeOwner) requests() []owner.Request {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]owner.Request(nil), o.served...)
}

// fakeOrigin answers every fetch with "origin:<path>".
type fakeOrigin struct{ calls atomic.Int32 }

func (o *fakeOrigin) Fetch(ctx context.Context, r *http.Request, p *policy.Policy, fill bool, extra http.Header) (*http.Response, error) {
	o.calls.Add(1)
	if r.URL.Path == "/down" {
		return nil, errors.New("dial tcp: connection refused")
	}
	return &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"text/plain"}}, ContentLength: -1,
		Body: io.NopCloser(strings.NewReader("origin:" + r.URL.Path))}, nil
}

// fakePeers answers every relay as the owner would, or fails it.
type fakePeers struct {
	mu    sync.Mutex
	err   error
	asked []string
	hdr   []http.Header
}

func (p *fakePeers) Forward(ctx context.Context, addr string, r *http.Request, h http.Header) (*http.Response, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.asked, p.hdr = append(p.asked, addr), append(p.hdr, h)
	if p.err != nil {
		return nil, p.err
	}
	body := "peer:b"
	if r.Method == http.MethodHead {
		body = "" // its Content-Length is the GET's, as a transport reads it
	}
	return &http.Response{StatusCode: 200, ContentLength: 6,
		Header: http.Header{"X-Cache": {"MISS"}, "X-Cache-Node": {"b"}, "Cache-Status": {"b; fwd=uri-miss; fwd-status=200; ttl=30; stored"}, hop.PurgeRevisionField: {"3"}},
		Body:   io.NopCloser(strings.NewReader(body))}, nil
}

// fakePurger records the purge calls and answers complete.
type fakePurger struct {
	calls atomic.Int32
	err   error
	md    metadata.MD
}

func (p *fakePurger) Purge(ctx context.Context, call PurgeCall) (*pb.PurgeStatus, error) {
	p.calls.Add(1)
	p.md, _ = metadata.FromOutgoingContext(ctx)
	if p.err != nil {
		return nil, p.err
	}
	return &pb.PurgeStatus{Complete: true}, nil
}

type testFront struct {
	*Front
	owner  *fakeOwner
	origin *fakeOrigin
	peers  *fakePeers
	purger *fakePurger
	tasks  *tasks.Group
	rts    atomic.Pointer[routes.Table]
	ps     atomic.Pointer[policy.Set]
}

// newTestFront is node a's front, in a ring of a and b, with policies ps.
func newTestFront(t *testing.T, ps []*pb.CachePolicy, opts ...func(*Config)) *testFront {
	t.Helper()
	tf := &testFront{owner: &fakeOwner{}, origin: &fakeOrigin{}, peers: &fakePeers{}, purger: &fakePurger{}, tasks: tasks.New(nil)}
	set, err := policy.Empty.Apply(&pb.PolicySet{Revision: 1, Policies: ps})
	if err != nil {
		t.Fatal(err)
	}
	tf.ps.Store(set)
	rt, err := routes.New(&pb.RingEpoch{Epoch: 7, Members: []*pb.Member{{Id: "a", PeerAddress: "10.0.0.1:9080"},
		{Id: "b", PeerAddress: "10.0.0.2:9080", PublicUrl: "http://b.example"}}})
	if err != nil {
		t.Fatal(err)
	}
	tf.rts.Store(rt)
	cfg := Config{ID: "a", Via: routes.Via("a", "10.0.0.1:9080"), RelayTimeout: 5 * time.Second, OriginTimeout: 5 * time.Second,
		HotThreshold: 1, Hot: sketch.New(1024, time.Minute, nil), HotKeys: &hotkey.List{}, Logs: &logstream.Hub{},
		PurgeAllow: []netip.Prefix{netip.MustParsePrefix("192.0.2.0/24")}, AdminToken: "admin-token-1", JoinToken: "join-token-1",
		Purger: tf.purger, ControlPlane: "cp:7070", AccessLog: slog.New(slog.DiscardHandler), AccessLogSample: 1,
		RequestEpoch: func(uint64) {}, Owner: tf.owner, Origin: tf.origin, Peers: tf.peers, Routes: &tf.rts, Policies: &tf.ps,
		Shadow: metrics.NewShadow(1<<30, 1000), Metrics: metrics.New(), Tasks: tf.tasks, Logger: slog.New(slog.DiscardHandler)}
	for _, o := range opts {
		o(&cfg)
	}
	tf.Front = New(cfg)
	t.Cleanup(tf.tasks.Stop)
	return tf
}

// get sends a client request for path to the front; header pairs.
func (tf *testFront) get(method, path string, header ...string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(method, "http://shop.example"+path, nil)
	r.RemoteAddr = "198.51.100.7:4000"
	for i := 0; i+1 < len(header); i += 2 {
		r.Header.Add(header[i], header[i+1])
	}
	w := httptest.NewRecorder()
	tf.ServeClient(w, r)
	return w
}

// keyOwnedBy is a path under prefix whose key node id owns.
func keyOwnedBy(t *testing.T, tf *testFront, prefix, id string) string {
	t.Helper()
	for i := 0; i < 1000; i++ {
		p := prefix + string(rune('a'+i%26)) + strings.Repeat("x", i/26)
		if tf.rts.Load().Owner("httpshop.example"+p).GetId() == id {
			return p
		}
	}
	t.Fatalf("no key under %s owned by %s", prefix, id)
	return ""
}

// The request the owner gets was built once: its key, its policy, the
// epoch, the arrival time; a key this node owns is served here.
func TestALocalKeyIsServedByTheOwnerWithOneRequestValue(t *testing.T) {
	tf := newTestFront(t, nil, func(c *Config) { c.Hot = nil })
	path := keyOwnedBy(t, tf, "/own/", "a")
	w := tf.get("GET", path)
	if w.Body.String() != "owner:httpshop.example"+path {
		t.Fatalf("answer %q", w.Body.String())
	}
	reqs := tf.owner.requests()
	if len(reqs) != 1 || reqs[0].Routes != tf.rts.Load() || reqs[0].Policy == nil || reqs[0].Now.IsZero() || reqs[0].Copy {
		t.Fatalf("the owner was asked %+v", reqs)
	}
	if got := metricText(t, tf.cfg.Metrics, "shardcache_requests_total"); !strings.Contains(got, `cache="HIT"`) || !strings.Contains(got, `route="local"`) {
		t.Fatalf("the request was counted as %s", got)
	}
}

// A key of another node is relayed with the hop fields; its answer is
// passed on with this node's Cache-Status member added; the owner's purge
// revision does not reach the client.
func TestAKeyOfAnotherNodeIsRelayed(t *testing.T) {
	tf := newTestFront(t, nil, func(c *Config) { c.Hot = nil })
	path := keyOwnedBy(t, tf, "/rel/", "b")
	w := tf.get("GET", path)
	if w.Body.String() != "peer:b" || w.Header().Get(hop.PurgeRevisionField) != "" {
		t.Fatalf("relayed answer %q, header %v", w.Body.String(), w.Header())
	}
	if cs := w.Header().Values("Cache-Status"); len(cs) != 2 || !strings.HasPrefix(cs[1], "a; fwd=uri-miss") {
		t.Fatalf("Cache-Status %q, want the owner's member then this node's", cs)
	}
	h := tf.peers.hdr[0]
	if tf.peers.asked[0] != "10.0.0.2:9080" || h.Get(hop.Marker) != "a" || h.Get(hop.EpochField) != "7" {
		t.Fatalf("relayed to %s with %v", tf.peers.asked[0], h)
	}
	// A HEAD's answer names the GET's length and has no body: it is passed
	// on, not taken for one that broke off and served here.
	if w := tf.get("HEAD", path); w.Code != 200 || w.Body.Len() != 0 || w.Header().Get("X-Cache-Node") != "b" || len(tf.peers.asked) != 2 {
		t.Fatalf("a relayed HEAD: %d %q %v, %d relays", w.Code, w.Body.String(), w.Header(), len(tf.peers.asked))
	}
	// An owner that cannot be reached: the next member, then this node.
	tf.peers.err = relay.ErrPeerDown
	w = tf.get("GET", path)
	if w.Body.String() != "owner:httpshop.example"+path {
		t.Fatalf("the owner down: %q", w.Body.String())
	}
	// A header too large for the hop is the client's 431.
	tf.peers.err = relay.ErrHeaderTooLarge
	if w := tf.get("GET", path); w.Code != http.StatusRequestHeaderFieldsTooLarge {
		t.Fatalf("too large for the hop: %d", w.Code)
	}
}

// A hot key this node does not own is served from its copy when there is
// one, else relayed for the owner to keep a copy of.
func TestAHotKeyTriesTheCopyThenRelays(t *testing.T) {
	tf := newTestFront(t, []*pb.CachePolicy{{Name: "hot", PathPrefix: "/hot/", ReplicationFactor: 1}})
	path := keyOwnedBy(t, tf, "/hot/", "b")
	for range 3 {
		tf.get("GET", path)
	}
	if tf.owner.kept == 0 {
		t.Fatal("a hot key's relayed answer was not offered for a copy")
	}
	tf.owner.copies = true
	if w := tf.get("GET", path); !strings.HasPrefix(w.Body.String(), "owner:") {
		t.Fatalf("with a copy: %q", w.Body.String())
	}
}

// A key this node owns only once it is hot (its second owner) is copied
// while it is not: relayed once, its next requests are served here from
// the copy, not relayed until they make it hot. Once hot, the copy still
// answers first; without one, the node's store, filled from the first
// owner.
func TestALaterOwnerKeepsACopyOfAKeyNotYetHot(t *testing.T) {
	tf := newTestFront(t, []*pb.CachePolicy{{Name: "rf2", PathPrefix: "/rf2/", ReplicationFactor: 2}},
		func(c *Config) { c.HotThreshold = 1000 })
	path := keyOwnedBy(t, tf, "/rf2/", "b") // b first, then a: this node
	if w := tf.get("GET", path); len(tf.peers.asked) != 1 || tf.owner.keptCold != 1 {
		t.Fatalf("first request: %d relays, %d copies offered: %q", len(tf.peers.asked), tf.owner.keptCold, w.Body.String())
	}
	tf.owner.copies = true
	w := tf.get("GET", path)
	if reqs := tf.owner.requests(); len(tf.peers.asked) != 1 || len(reqs) != 1 || !reqs[0].Copy || !strings.HasPrefix(w.Body.String(), "owner:") {
		t.Fatalf("with a copy: %d relays, owner asked %+v", len(tf.peers.asked), reqs)
	}
	// Hot now: the copy answers while it lasts, then the store, filling
	// from the first owner.
	tf.Front.cfg.HotThreshold = 1
	tf.get("GET", path)
	if reqs := tf.owner.requests(); len(tf.peers.asked) != 1 || len(reqs) != 2 || !reqs[1].Copy {
		t.Fatalf("hot with a copy: %d relays, owner asked %+v", len(tf.peers.asked), reqs)
	}
	tf.owner.mu.Lock()
	tf.owner.copies = false
	tf.owner.mu.Unlock()
	tf.get("GET", path)
	if reqs := tf.owner.requests(); len(tf.peers.asked) != 1 || len(reqs) != 3 || reqs[2].Copy || reqs[2].From.GetId() != "b" {
		t.Fatalf("hot without a copy: %d relays, owner asked %+v", len(tf.peers.asked), reqs[2:])
	}
}

// A key is listed for pre-copy on the request that makes it hot, and
// every request for it from then on is counted hot, though the list is
// told of it only now and then.
func TestAKeyIsListedHotWhenItBecomesHot(t *testing.T) {
	tf := newTestFront(t, []*pb.CachePolicy{{Name: "hot", PathPrefix: "/hot/", ReplicationFactor: 1}})
	path := keyOwnedBy(t, tf, "/hot/", "b")
	listed := func() bool {
		for _, k := range tf.cfg.HotKeys.Hottest(tf.cfg.Hot, 10) {
			if strings.HasSuffix(k.Key, path) && k.URI == path {
				return true
			}
		}
		return false
	}
	tf.get("GET", path)
	if listed() {
		t.Fatal("listed hot after one request, under the threshold")
	}
	tf.get("GET", path) // the second crosses the threshold (1 a minute)
	if !listed() {
		t.Fatal("not listed on the request that made it hot")
	}
	for range 10 {
		tf.get("GET", path)
	}
	if got := testutil.ToFloat64(tf.cfg.Metrics.Hot.WithLabelValues("hot_request")); got != 11 {
		t.Fatalf("hot requests counted: %v, want 11", got)
	}
}

// Bypass: a POST goes to the origin with BYPASS and, succeeding,
// invalidates through the owner; an origin that cannot be reached is 502
// naming no address.
func TestBypass(t *testing.T) {
	tf := newTestFront(t, nil)
	w := tf.get("POST", "/form")
	if w.Body.String() != "origin:/form" || w.Header().Get("X-Cache") != httpcache.CacheBypass || len(tf.owner.invalidated) != 1 {
		t.Fatalf("POST: %q %s, %d invalidations", w.Body.String(), w.Header().Get("X-Cache"), len(tf.owner.invalidated))
	}
	if cs := w.Header().Get("Cache-Status"); cs != "a; fwd=method; fwd-status=200; detail=method" {
		t.Fatalf("Cache-Status %q", cs)
	}
	w = tf.get("GET", "/down", "Cache-Control", "no-store")
	if w.Code != http.StatusBadGateway || strings.Contains(w.Header().Get("Proxy-Status"), "127.0.0.1") {
		t.Fatalf("origin down: %d %q", w.Code, w.Header().Get("Proxy-Status"))
	}
}

// Redirect mode answers 307 with the owner's public URL.
func TestRedirectMode(t *testing.T) {
	tf := newTestFront(t, []*pb.CachePolicy{{Name: "r", PathPrefix: "/r/", Mode: pb.CacheMode_CACHE_MODE_REDIRECT}}, func(c *Config) { c.Hot = nil })
	path := keyOwnedBy(t, tf, "/r/", "b")
	w := tf.get("GET", path+"?q=1")
	if w.Code != http.StatusTemporaryRedirect || w.Header().Get("Location") != "http://b.example"+path+"?q=1" {
		t.Fatalf("redirect: %d %q", w.Code, w.Header().Get("Location"))
	}
}

// A sliced policy asks the owner to assemble first; an object that cannot
// be sliced is routed whole.
func TestSlicedPolicyAssemblesFirst(t *testing.T) {
	tf := newTestFront(t, []*pb.CachePolicy{{Name: "s", PathPrefix: "/s/", SliceSize: policy.MinSliceSize}}, func(c *Config) { c.Hot = nil })
	path := keyOwnedBy(t, tf, "/s/", "a")
	tf.get("GET", path)
	reqs := tf.owner.requests()
	if len(reqs) != 2 || !reqs[0].Assemble || reqs[1].Assemble {
		t.Fatalf("asked %d times (assemble first?)", len(reqs))
	}
	tf.owner.sliced = true
	tf.get("GET", path)
	if got := metricText(t, tf.cfg.Metrics, "shardcache_requests_total"); !strings.Contains(got, `route="sliced"`) {
		t.Fatalf("not counted sliced: %s", got)
	}
}

// PURGE: through the Purger with the client's token, named as relayed for
// the client; without a token only from an allowed address; a wrong
// token refused by the control plane is 401, then 429.
func TestPurgeRequests(t *testing.T) {
	tf := newTestFront(t, nil)
	if w := tf.get("PURGE", "/obj", "Authorization", "Bearer a-client-token"); w.Code != 200 || tf.purger.calls.Load() != 1 {
		t.Fatalf("PURGE with a token: %d (%d calls)", w.Code, tf.purger.calls.Load())
	}
	if got := tf.purger.md.Get(pb.PurgeForMetadata); len(got) != 1 || got[0] != "198.51.100.7" {
		t.Fatalf("the call names client %v", got)
	}
	if w := tf.get("PURGE", "/obj"); w.Code != http.StatusForbidden {
		t.Fatalf("PURGE without a token from elsewhere: %d", w.Code)
	}
	if w := tf.get("PURGE", "/*"); w.Code != http.StatusForbidden {
		t.Fatalf("PURGE /* without a token: %d", w.Code)
	}
	if w := tf.get("PURGE", "/p*", "Authorization", "Bearer a-client-token", "X-Purge-All", "true"); w.Code != 200 {
		t.Fatalf("a prefix PURGE: %d", w.Code)
	}
	if w := tf.get("PURGE", "/", "Authorization", "Bearer a-client-token", "Surrogate-Key", "a b c"); w.Code != 200 || tf.purger.calls.Load() != 5 {
		t.Fatalf("a tag PURGE: %d (%d calls)", w.Code, tf.purger.calls.Load())
	}
	if w := tf.get("PURGE", "/obj", "Authorization", "Bearer x"); w.Code != http.StatusUnauthorized {
		t.Fatalf("a malformed token: %d", w.Code)
	}
	tf.purger.err = status.Error(codes.Unauthenticated, "invalid admin token")
	for range purgeAuthBurst - 1 {
		if w := tf.get("PURGE", "/obj", "Authorization", "Bearer wrong-token"); w.Code != http.StatusUnauthorized {
			t.Fatalf("a wrong token: %d", w.Code)
		}
	}
	if w := tf.get("PURGE", "/obj", "Authorization", "Bearer wrong-token"); w.Code != http.StatusTooManyRequests || w.Header().Get("Retry-After") == "" {
		t.Fatalf("past the client's burst: %d", w.Code)
	}
	tf.purger.err = status.Error(codes.Unavailable, "no replica")
	if w := tf.get("PURGE", "/obj", "X-Forwarded-For", "192.0.2.9"); w.Code != http.StatusForbidden {
		t.Fatalf("an untrusted X-Forwarded-For passed purge_allow: %d", w.Code)
	}
}

// The peer gate in plain text: HTTP/1.1 (served over mutual TLS alone) and
// requests without the hop marker are refused and marked; a member's
// request reaches the owner with its hop fields as typed facts; an
// invalidation and a hot-key listing are answered.
func TestThePeerGate(t *testing.T) {
	tf := newTestFront(t, nil)
	peer := func(proto int, header ...string) *httptest.ResponseRecorder {
		r := httptest.NewRequest("GET", "http://shop.example/p", nil)
		r.ProtoMajor = proto
		for i := 0; i+1 < len(header); i += 2 {
			r.Header.Set(header[i], header[i+1])
		}
		w := httptest.NewRecorder()
		tf.ServePeer(w, r)
		return w
	}
	if w := peer(1, hop.Marker, "b"); w.Code != http.StatusHTTPVersionNotSupported || w.Header().Get(hop.RefusedField) != "http1" {
		t.Fatalf("HTTP/1.1: %d %v", w.Code, w.Header())
	}
	if w := peer(2); w.Code != http.StatusBadRequest || w.Header().Get(hop.RefusedField) != "no_hop" {
		t.Fatalf("no hop marker: %d", w.Code)
	}
	if w := peer(2, hop.Marker, "b", hop.HandoffField, "1", hop.SchemeField, "https"); w.Code != 200 {
		t.Fatalf("a member's handoff: %d", w.Code)
	}
	reqs := tf.owner.requests()
	if req := reqs[len(reqs)-1]; req.Hop.From != "b" || !req.Hop.Handoff || req.Key != "httpsshop.example/p" {
		t.Fatalf("the owner got %+v", req)
	}
	if w := peer(2, hop.Marker, "b", hop.InvalidateField, "1"); w.Code != http.StatusNoContent || len(tf.owner.invalidated) != 1 {
		t.Fatalf("an invalidation: %d", w.Code)
	}
	if w := peer(2, hop.Marker, "b", hop.HotKeysField, "10"); w.Code != 200 || !strings.HasPrefix(w.Body.String(), "[") {
		t.Fatalf("hot keys: %d %q", w.Code, w.Body.String())
	}
	if w := peer(2, hop.Marker, "b", hop.HotKeysField, "x"); w.Code != http.StatusBadRequest {
		t.Fatalf("a bad hot-key count: %d", w.Code)
	}
	if w := peer(2, hop.Marker, "b", hop.SliceField, "nonsense"); w.Code != http.StatusBadRequest {
		t.Fatalf("a bad slice field: %d", w.Code)
	}
}

// With mutual TLS the peer gate serves a certificate naming a member
// only, over either protocol, and refuses the others alike.
func TestThePeerGateChecksTheCertificatesMember(t *testing.T) {
	tf := newTestFront(t, nil, func(c *Config) { c.PeerMTLS = true })
	for _, proto := range []int{1, 2} {
		for id, want := range map[string]int{"b": 200, "mallory": http.StatusForbidden} {
			r := httptest.NewRequest("GET", "http://shop.example/p", nil)
			r.ProtoMajor = proto
			r.Header.Set(hop.Marker, id)
			r.TLS = &tls.ConnectionState{PeerCertificates: []*x509.Certificate{{DNSNames: []string{id}}}}
			w := httptest.NewRecorder()
			tf.ServePeer(w, r)
			if w.Code != want {
				t.Fatalf("a certificate for %s over HTTP/%d: %d, want %d", id, proto, w.Code, want)
			}
			if want != 200 && w.Header().Get(hop.RefusedField) != "not_a_member" {
				t.Fatalf("a certificate for %s over HTTP/%d: refused as %q, want not_a_member", id, proto, w.Header().Get(hop.RefusedField))
			}
		}
	}
}

// A relayed answer's outcome is read from the owner's fields.
func TestRelayedOutcome(t *testing.T) {
	out := relayedOutcome(http.Header{"X-Cache": {"HIT"}, "X-Cache-Node": {"b"}, "Cache-Status": {"b; hit; ttl=42, a; fwd=uri-miss"}})
	if out.Member.Cache != "HIT" || out.Node != "b" || out.Member.TTL != 42*time.Second || !out.Kept() {
		t.Fatalf("outcome %+v", out)
	}
	if out := relayedOutcome(http.Header{"X-Cache": {"MISS"}, "Cache-Status": {"b; fwd=uri-miss; fwd-status=200"}}); out.Kept() {
		t.Fatalf("an unstored miss counted as kept: %+v", out)
	}
	// An origin behind a cache of its own: the owner's member is the one
	// naming it, after the origin's.
	out = relayedOutcome(http.Header{"X-Cache": {"MISS"}, "X-Cache-Node": {"b"},
		"Cache-Status": {"OriginCDN; hit; ttl=100; detail=x", "b; fwd=uri-miss; fwd-status=200; detail=set-cookie"}})
	if out.Kept() || out.Member.HasTTL || out.Member.Detail != httpcache.ReasonSetCookie {
		t.Fatalf("the owner's member behind the origin's: outcome %+v", out)
	}
}

// metricText is the exposition of a metric family of ms.
func metricText(t *testing.T, ms *metrics.Set, name string) string {
	t.Helper()
	fams, err := ms.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				b.WriteString(l.GetName() + `="` + l.GetValue() + `" `)
			}
			b.WriteString("\n")
		}
	}
	return b.String()
}
