package owner

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/shardcache/shardcache/dataplane/httpcache"
	"github.com/shardcache/shardcache/dataplane/registry"
	pb "github.com/shardcache/shardcache/proto/shardcache/v1"
	"github.com/shardcache/shardcache/sdk/policy"
)

// fakeRegistry is a real HTTP registry of a few objects that counts the
// requests for each path and answers with status when it is set.
type fakeRegistry struct {
	*httptest.Server
	mu      sync.Mutex
	objects map[string][]byte        // path -> body
	seen    map[string]int           // "METHOD path" -> count
	holds   map[string]chan struct{} // path -> the body's last byte waits for it
	status  int
}

func newFakeRegistry(t *testing.T) *fakeRegistry {
	fr := &fakeRegistry{objects: map[string][]byte{}, seen: map[string]int{}, holds: map[string]chan struct{}{}}
	fr.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fr.mu.Lock()
		fr.seen[r.Method+" "+r.URL.Path]++
		body, ok := fr.objects[r.URL.Path]
		hold := fr.holds[r.URL.Path]
		status := fr.status
		fr.mu.Unlock()
		switch {
		case status != 0:
			w.WriteHeader(status)
			return
		case !ok:
			http.Error(w, `{"errors":[{"code":"MANIFEST_UNKNOWN"}]}`, http.StatusNotFound)
			return
		}
		sum := sha256.Sum256(body)
		d := "sha256:" + hex.EncodeToString(sum[:])
		w.Header().Set("Docker-Content-Digest", d)
		w.Header().Set("Etag", `"`+d+`"`)
		w.Header().Set("Content-Type", "application/vnd.oci.image.manifest.v1+json")
		w.Header().Set("Content-Length", fmt.Sprint(len(body)))
		if r.Method == http.MethodHead {
			return
		}
		if hold != nil && len(body) > 0 {
			w.Write(body[:len(body)-1])
			w.(http.Flusher).Flush()
			select {
			case <-hold:
			case <-r.Context().Done():
				return
			}
			body = body[len(body)-1:]
		}
		w.Write(body)
	}))
	t.Cleanup(fr.Close)
	return fr
}

func (fr *fakeRegistry) put(path string, body []byte) {
	fr.mu.Lock()
	defer fr.mu.Unlock()
	fr.objects[path] = body
}

// hold makes the body of path wait for release before its last byte.
func (fr *fakeRegistry) hold(path string, release chan struct{}) {
	fr.mu.Lock()
	defer fr.mu.Unlock()
	fr.holds[path] = release
}

// startedWriter is a recorder that closes started at the body's first write.
type startedWriter struct {
	*httptest.ResponseRecorder
	once    sync.Once
	started chan struct{}
}

func (w *startedWriter) Write(p []byte) (int, error) {
	w.once.Do(func() { close(w.started) })
	return w.ResponseRecorder.Write(p)
}

func (fr *fakeRegistry) count(method, path string) int {
	fr.mu.Lock()
	defer fr.mu.Unlock()
	return fr.seen[method+" "+path]
}

func (fr *fakeRegistry) answer(status int) {
	fr.mu.Lock()
	defer fr.mu.Unlock()
	fr.status = status
}

func digestOf(b []byte) string {
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// mirrorOwner is an owner whose Upstream is a real registry client, with
// a mirror policy of two hosts on one fake registry.
func mirrorOwner(t *testing.T) (*testOwner, *fakeRegistry, *policy.Policy) {
	fr := newFakeRegistry(t)
	to := newTestOwner(t, nil, func(c *Config) { c.Upstream = registry.NewClient(registry.Config{Via: "a"}) })
	p := policyOf(t, &pb.CachePolicy{Name: "m", PathPrefix: "/v2/", DefaultRegistry: "a.io", TagTtl: durationpb.New(time.Minute),
		Registries: []*pb.Registry{{Host: "a.io", Url: fr.URL}, {Host: "b.io", Url: fr.URL}}})
	return to, fr, p
}

func mirrorRequest(t *testing.T, p *policy.Policy, path string, now time.Time) *Request {
	t.Helper()
	req := request(path, p, "Accept", "application/vnd.oci.image.manifest.v1+json")
	ref, err := registry.Parse(req.HTTP, p)
	if err != nil {
		t.Fatal(err)
	}
	req.Registry, req.Key, req.Now = ref, ref.Key(), now
	return req
}

func TestMirrorBlobKeyedByDigestNeverRevalidated(t *testing.T) {
	to, fr, p := mirrorOwner(t)
	blob := []byte("layer")
	d := digestOf(blob)
	fr.put("/v2/x/app/blobs/"+d, blob)
	now := time.Now()
	for i, path := range []string{"/v2/x/app/blobs/" + d + "?ns=a.io", "/v2/x/app/blobs/" + d, "/v2/b.io/x/app/blobs/" + d, "/v2/x/app/blobs/" + d + "?ns=b.io&x=1"} {
		w, out := to.serve(mirrorRequest(t, p, path, now.Add(time.Duration(i)*365*24*time.Hour)))
		if w.Code != 200 || w.Body.String() != "layer" {
			t.Fatalf("%s: %d %q", path, w.Code, w.Body)
		}
		if i > 0 && out.Member.Cache != httpcache.CacheHit {
			t.Fatalf("%s, %d years on: %s, want a hit", path, i, out.Member.Cache)
		}
	}
	if n := fr.count("GET", "/v2/x/app/blobs/"+d); n != 1 {
		t.Fatalf("%d upstream GETs of the blob, want 1", n)
	}
	if n := fr.count("HEAD", "/v2/x/app/blobs/"+d); n != 0 {
		t.Fatalf("%d revalidations of the blob, want none", n)
	}
}

func TestMirrorRefusesWhatDoesNotMatchItsDigest(t *testing.T) {
	to, fr, p := mirrorOwner(t)
	d := digestOf([]byte("the real layer"))
	fr.put("/v2/app/blobs/"+d, []byte("a poisoned layer"))
	bigLayer := bytes.Repeat([]byte("l"), registry.MaxCheckedBlobBytes+1)
	bd := digestOf(append([]byte("real "), bigLayer...))
	fr.put("/v2/app/blobs/"+bd, bigLayer)
	// The layer's last byte waits until the client has had its first ones.
	sw := &startedWriter{ResponseRecorder: httptest.NewRecorder(), started: make(chan struct{})}
	fr.hold("/v2/app/blobs/"+bd, sw.started)
	md := digestOf([]byte(`{"real":1}`))
	fr.put("/v2/app/manifests/"+md, []byte(`{"poisoned":1}`))
	fr.put("/v2/app/manifests/big", []byte(strings.Repeat(" ", registry.MaxManifestBytes+1)))
	now := time.Now()
	// A small blob is read whole first: a 502 with an OCI error body.
	small, _ := to.serve(mirrorRequest(t, p, "/v2/app/blobs/"+d, now))
	if small.Code != http.StatusBadGateway || !strings.Contains(small.Body.String(), `"code":"DIGEST_INVALID"`) {
		t.Fatalf("poisoned small blob: %d %s", small.Code, small.Body)
	}
	if _, ok := to.store.Get("oci-blob:m/" + d); ok {
		t.Fatal("a blob that does not match its digest was stored")
	}
	// A larger blob streams: the mismatch shows at its end, and the
	// transfer is cut off (it never ends cleanly), nothing stored.
	cut := func() (v any) {
		defer func() { v = recover() }()
		to.Serve(sw, *mirrorRequest(t, p, "/v2/app/blobs/"+bd, now))
		return nil
	}()
	if cut != http.ErrAbortHandler {
		t.Fatalf("poisoned large blob: the answer ended with %v, want it cut off (http.ErrAbortHandler)", cut)
	}
	if sw.Code != http.StatusOK || sw.Body.Len() == 0 || sw.Body.Len() >= len(bigLayer) {
		t.Fatalf("poisoned large blob: %d and %d bytes went out before the cut, want 200 and fewer than %d", sw.Code, sw.Body.Len(), len(bigLayer))
	}
	to.settled()
	if _, ok := to.store.Get("oci-blob:m/" + bd); ok {
		t.Fatal("a large blob that does not match its digest was stored")
	}
	// A manifest is read whole first: a 502 with an OCI error body.
	mw, _ := to.serve(mirrorRequest(t, p, "/v2/app/manifests/"+md, now))
	if mw.Code != http.StatusBadGateway || !strings.Contains(mw.Body.String(), `"code":"DIGEST_INVALID"`) {
		t.Fatalf("poisoned manifest: %d %s", mw.Code, mw.Body)
	}
	if _, ok := to.store.Get("oci-manifest:m/" + md); ok {
		t.Fatal("a manifest that does not match its digest was stored")
	}
	if n := testutil.ToFloat64(to.cfg.Metrics.DigestMismatches); n != 3 {
		t.Fatalf("digest mismatches counted %v, want 3", n)
	}
	bw, _ := to.serve(mirrorRequest(t, p, "/v2/app/manifests/big", now))
	if bw.Code != http.StatusBadGateway || !strings.Contains(bw.Body.String(), `"code":"SIZE_INVALID"`) {
		t.Fatalf("a manifest over the bound: %d %s", bw.Code, bw.Body)
	}
	if _, ok := to.store.Get("oci-tag:m/a.io/app:big"); ok {
		t.Fatal("a manifest over the bound was stored")
	}
}

func TestMirrorTagRevalidatedByHeadAndServedStaleOnFailure(t *testing.T) {
	to, fr, p := mirrorOwner(t)
	fr.put("/v2/app/manifests/v1", []byte(`{"v":1}`))
	now := time.Now()
	if w, out := to.serve(mirrorRequest(t, p, "/v2/app/manifests/v1", now)); w.Code != 200 || out.Member.Cache != httpcache.CacheMiss {
		t.Fatalf("first pull: %d %s", w.Code, out.Member.Cache)
	}
	if _, out := to.serve(mirrorRequest(t, p, "/v2/app/manifests/v1", now.Add(30*time.Second))); out.Member.Cache != httpcache.CacheHit {
		t.Fatalf("within the tag TTL: %s", out.Member.Cache)
	}
	w, out := to.serve(mirrorRequest(t, p, "/v2/app/manifests/v1", now.Add(2*time.Minute)))
	if w.Code != 200 || out.Member.Cache != httpcache.CacheRevalidated || w.Body.String() != `{"v":1}` {
		t.Fatalf("past the tag TTL: %d %s %q", w.Code, out.Member.Cache, w.Body)
	}
	if g, h := fr.count("GET", "/v2/app/manifests/v1"), fr.count("HEAD", "/v2/app/manifests/v1"); g != 1 || h != 1 {
		t.Fatalf("%d GETs and %d HEADs, want 1 and 1: an unchanged tag is revalidated by HEAD", g, h)
	}
	for i, status := range []int{http.StatusTooManyRequests, http.StatusServiceUnavailable} {
		fr.answer(status)
		w, out = to.serve(mirrorRequest(t, p, "/v2/app/manifests/v1", now.Add(time.Duration(4+2*i)*time.Minute)))
		if w.Code != 200 || out.Member.Cache != httpcache.CacheStale || !strings.Contains(w.Header().Get("Cache-Status"), "ttl=-") ||
			!strings.Contains(w.Header().Get("Cache-Status"), "detail=stale") {
			t.Fatalf("registry answering %d: %d %s %q", status, w.Code, out.Member.Cache, w.Header().Get("Cache-Status"))
		}
	}
	fr.Close()
	w, out = to.serve(mirrorRequest(t, p, "/v2/app/manifests/v1", now.Add(10*time.Minute)))
	if w.Code != 200 || out.Member.Cache != httpcache.CacheStale {
		t.Fatalf("registry down: %d %s", w.Code, out.Member.Cache)
	}
	w, _ = to.serve(mirrorRequest(t, p, "/v2/app/manifests/v2", now.Add(10*time.Minute)))
	if w.Code != http.StatusBadGateway || !strings.Contains(w.Body.String(), `"code":"UPSTREAM_FAILED"`) || !strings.Contains(w.Body.String(), "registry a.io") {
		t.Fatalf("an uncached tag, registry down: %d %s", w.Code, w.Body)
	}
}

// A referrers listing is passed through and stored, and revalidated like
// a tag: it changes as signatures are pushed.
func TestMirrorReferrersStoredAndRevalidated(t *testing.T) {
	to, fr, p := mirrorOwner(t)
	subject := digestOf([]byte("subject"))
	path := "/v2/app/referrers/" + subject
	fr.put(path, []byte(`{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","manifests":[]}`))
	now := time.Now()
	for i, want := range []string{httpcache.CacheMiss, httpcache.CacheHit, httpcache.CacheRevalidated} {
		w, out := to.serve(mirrorRequest(t, p, path+"?ns=b.io", now.Add(time.Duration(i*i)*40*time.Second)))
		if w.Code != 200 || out.Member.Cache != want || !strings.Contains(w.Body.String(), `"manifests":[]`) {
			t.Fatalf("pull %d: %d %s %q, want %s", i+1, w.Code, out.Member.Cache, w.Body, want)
		}
	}
	if g, h := fr.count("GET", path), fr.count("HEAD", path); g != 1 || h != 1 {
		t.Fatalf("%d GETs, %d HEADs of the listing, want 1 and 1", g, h)
	}
}

// Upstream failures a client cannot fix reach it as OCI errors naming
// them, and nothing is stored.
func TestMirrorUpstreamFailuresAreOCIErrors(t *testing.T) {
	dead := httptest.NewServer(http.NotFoundHandler())
	dead.Close()
	d := digestOf([]byte("x"))
	reg := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case strings.HasPrefix(r.URL.Path, "/v2/loop/"):
			http.Redirect(w, r, r.URL.Path, http.StatusFound)
		case strings.HasPrefix(r.URL.Path, "/v2/realm-down/"):
			w.Header().Set("WWW-Authenticate", `Bearer realm="`+dead.URL+`/token",service="s"`)
			w.WriteHeader(http.StatusUnauthorized)
		case strings.HasPrefix(r.URL.Path, "/v2/bad-challenge/"):
			w.Header().Set("WWW-Authenticate", `Bearer realm=`)
			w.WriteHeader(http.StatusUnauthorized)
		}
	}))
	t.Cleanup(reg.Close)
	to := newTestOwner(t, nil, func(c *Config) { c.Upstream = registry.NewClient(registry.Config{Via: "a"}) })
	p := policyOf(t, &pb.CachePolicy{Name: "m", PathPrefix: "/v2/", DefaultRegistry: "a.io", Registries: []*pb.Registry{{Host: "a.io", Url: reg.URL}}})
	for _, tc := range []struct{ name, want string }{
		{"loop", "redirects loop"},
		{"realm-down", "no token from the realm"},
		{"bad-challenge", "WWW-Authenticate"},
	} {
		req := mirrorRequest(t, p, "/v2/"+tc.name+"/blobs/"+d, time.Now())
		w, _ := to.serve(req)
		if w.Code != http.StatusBadGateway || !strings.Contains(w.Body.String(), `"code":"UPSTREAM_FAILED"`) || !strings.Contains(w.Body.String(), tc.want) ||
			w.Header().Get("Content-Type") != "application/json" {
			t.Errorf("%s: %d %s %s, want a 502 OCI error saying %q", tc.name, w.Code, w.Header().Get("Content-Type"), w.Body, tc.want)
		}
		if _, ok := to.store.Get(req.Key); ok {
			t.Errorf("%s: stored", tc.name)
		}
	}
}
