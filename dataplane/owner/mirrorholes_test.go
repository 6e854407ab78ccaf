package owner

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/shardcache/shardcache/dataplane/registry"
	pb "github.com/shardcache/shardcache/proto/shardcache/v1"
)

// mirrorOf is an owner whose mirror policy (cp, with its registry
// "a.io" set to h) fronts the handler h.
func mirrorOf(t *testing.T, h http.HandlerFunc, cp *pb.CachePolicy) (*testOwner, *pb.CachePolicy) {
	t.Helper()
	reg := httptest.NewServer(h)
	t.Cleanup(reg.Close)
	to := newTestOwner(t, nil, func(c *Config) { c.Upstream = registry.NewClient(registry.Config{Via: "a"}) })
	cp.Name, cp.PathPrefix, cp.DefaultRegistry = "m", "/v2/", "a.io"
	cp.Registries = []*pb.Registry{{Host: "a.io", Url: reg.URL}}
	return to, cp
}

// A registry's Set-Cookie (its session on the mirror's credentialed
// fetch) is never stored nor served: it was replayed to every client.
func TestAMirrorStoresNoUpstreamCookie(t *testing.T) {
	layer := []byte("a small layer")
	d := digestOf(layer)
	to, cp := mirrorOf(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Set-Cookie", "registry_session=SESSION-OF-THE-MIRRORS-CREDENTIALS; Path=/; HttpOnly")
		w.Header().Set("Cache-Control", "private, no-store")
		w.Header().Set("Content-Length", fmt.Sprint(len(layer)))
		w.Write(layer)
	}, &pb.CachePolicy{})
	p := policyOf(t, cp)
	now := time.Now()
	to.serve(mirrorRequest(t, p, "/v2/app/blobs/"+d, now)) // the first pull fills
	w, out := to.serve(mirrorRequest(t, p, "/v2/other/blobs/"+d, now.Add(time.Second)))
	if c := w.Header().Values("Set-Cookie"); len(c) > 0 {
		t.Errorf("another client's pull (%s) was sent the upstream's Set-Cookie %q (stored despite Cache-Control %q)",
			out.Member.Cache, c, w.Header().Get("Cache-Control"))
	}
}

// tag_ttl says how long a tag is served, whatever the registry's
// directives: its stale-while-revalidate kept a moved tag an hour on.
func TestAMirrorsTagTTLIsTheRegistrysDirectivesToo(t *testing.T) {
	var current atomic.Pointer[string]
	body := `{"v":1}`
	current.Store(&body)
	to, cp := mirrorOf(t, func(w http.ResponseWriter, r *http.Request) {
		b := []byte(*current.Load())
		w.Header().Set("Docker-Content-Digest", digestOf(b))
		w.Header().Set("Content-Type", "application/vnd.oci.image.manifest.v1+json")
		w.Header().Set("Cache-Control", "stale-while-revalidate=604800")
		w.Header().Set("Content-Length", fmt.Sprint(len(b)))
		if r.Method == http.MethodHead {
			return
		}
		w.Write(b)
	}, &pb.CachePolicy{TagTtl: durationpb.New(time.Minute)})
	p := policyOf(t, cp)
	now := time.Now()
	to.serve(mirrorRequest(t, p, "/v2/app/manifests/latest", now))
	moved := `{"v":2}`
	current.Store(&moved) // the tag is moved at the registry
	w, out := to.serve(mirrorRequest(t, p, "/v2/app/manifests/latest", now.Add(time.Hour)))
	if w.Body.String() != moved {
		t.Errorf("an hour past tag_ttl (1m), the tag moved: served %s %q (Cache-Status %q), want the registry's %q",
			out.Member.Cache, w.Body, w.Header().Get("Cache-Status"), moved)
	}
}

// A manifest request sends the upstream no query (its key holds none):
// what a registry answered one client's query was stored as the tag.
func TestAMirrorSendsTheUpstreamNoQueryTheKeyLacks(t *testing.T) {
	to, cp := mirrorOf(t, func(w http.ResponseWriter, r *http.Request) {
		b := []byte(`{"for":"` + r.URL.RawQuery + `"}`)
		w.Header().Set("Docker-Content-Digest", digestOf(b))
		w.Header().Set("Content-Type", "application/vnd.oci.image.manifest.v1+json")
		w.Write(b)
	}, &pb.CachePolicy{})
	p := policyOf(t, cp)
	now := time.Now()
	to.serve(mirrorRequest(t, p, "/v2/app/manifests/v1?digest=sha256:attacker&x=1", now))
	w, out := to.serve(mirrorRequest(t, p, "/v2/app/manifests/v1", now.Add(time.Second)))
	if strings.Contains(w.Body.String(), "attacker") {
		t.Errorf("a plain pull of app:v1 got %s %q: the answer to another client's query", out.Member.Cache, w.Body)
	}
}

// Only the registry's own 401 is answered with its credentials: the host a
// blob was redirected to (object storage) was sent them when it asked.
func TestAMirrorAnswersOnlyItsRegistrysChallenge(t *testing.T) {
	var leaked []string
	var mu sync.Mutex
	storage := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/token" {
			mu.Lock()
			leaked = append(leaked, r.Header.Get("Authorization"))
			mu.Unlock()
			io.WriteString(w, `{"token":"t"}`)
			return
		}
		w.Header().Set("WWW-Authenticate", `Bearer realm="http://`+r.Host+`/token",service="storage",scope="blob:read"`)
		w.WriteHeader(http.StatusUnauthorized)
	}))
	t.Cleanup(storage.Close)
	creds := filepath.Join(t.TempDir(), "creds.json")
	os.WriteFile(creds, []byte(`{"username":"robot","password":"UPSTREAM-PASSWORD"}`), 0o600)
	to, cp := mirrorOf(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/token" { // the registry's own realm
			io.WriteString(w, `{"token":"registry-token","expires_in":300}`)
			return
		}
		if r.Header.Get("Authorization") != "Bearer registry-token" {
			w.Header().Set("WWW-Authenticate", `Bearer realm="http://`+r.Host+`/token",service="registry"`)
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		http.Redirect(w, r, storage.URL+"/signed/blob?sig=abc", http.StatusTemporaryRedirect)
	}, &pb.CachePolicy{})
	cp.Registries[0].CredentialsFile = creds
	p := policyOf(t, cp)
	// Two pulls of the repository: the second one's request carries the
	// kept token, and the 401 it meets is the storage host's.
	var w *httptest.ResponseRecorder
	for _, layer := range []string{"layer1", "layer2"} {
		w, _ = to.serve(mirrorRequest(t, p, "/v2/app/blobs/"+digestOf([]byte(layer)), time.Now()))
	}
	mu.Lock()
	defer mu.Unlock()
	t.Logf("last answer %d %s; storage realm asked %d times", w.Code, w.Body, len(leaked))
	for _, a := range leaked {
		if a != "" {
			u, pw, _ := (&http.Request{Header: http.Header{"Authorization": {a}}}).BasicAuth()
			t.Errorf("the storage host's token realm was sent the registry's credentials %s:%s (client answer %d)", u, pw, w.Code)
		}
	}
}

// Content by digest is stored with the digest its body was checked
// against as its Docker-Content-Digest, not the one a registry claimed.
func TestAMirrorStoresTheDigestItChecked(t *testing.T) {
	body := []byte(`{"schemaVersion":2}`)
	other := digestOf([]byte("another manifest"))
	to, cp := mirrorOf(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Docker-Distribution-Api-Version", "registry/2.0")
		w.Header().Set("Content-Type", "application/vnd.oci.image.manifest.v1+json")
		w.Header().Set("Docker-Content-Digest", other)
		w.Write(body)
	}, &pb.CachePolicy{})
	cp.Registries = append(cp.Registries, &pb.Registry{Host: "b.io", Url: cp.Registries[0].Url})
	p := policyOf(t, cp)
	d := digestOf(body)
	now := time.Now()
	to.serve(mirrorRequest(t, p, "/v2/evil/app/manifests/"+d, now))
	w, out := to.serve(mirrorRequest(t, p, "/v2/library/app/manifests/"+d+"?ns=b.io", now.Add(time.Second)))
	if got := w.Header().Get("Docker-Content-Digest"); got != d {
		t.Errorf("GET manifests/%s... (another registry, %s): Docker-Content-Digest %s..., want the digest asked for", d[:19], out.Member.Cache, got[:19])
	}
}
