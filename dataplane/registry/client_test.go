package registry

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shardcache/shardcache/sdk/policy"
)

// upstreamFixture is a registry behind a Bearer realm, both real HTTP
// servers: the realm hands out "tok-<n>", the registry serves a blob and a
// tag only with a token, and counts what it is asked.
type upstreamFixture struct {
	realm, reg, signed *httptest.Server
	tokenFetches       atomic.Int64
	gets, heads        atomic.Int64
	realmAnswer        func(w http.ResponseWriter) // nil: a good token
	challenge          string                      // "": a Bearer challenge naming the realm
	blob               []byte
	blobDigest         string
	gate               chan struct{} // when set, the realm waits on it
}

func newUpstream(t *testing.T) *upstreamFixture {
	u := &upstreamFixture{blob: []byte("layer bytes")}
	sum := sha256.Sum256(u.blob)
	u.blobDigest = "sha256:" + hex.EncodeToString(sum[:])
	u.realm = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if u.gate != nil {
			<-u.gate
		}
		n := u.tokenFetches.Add(1)
		if user, pass, ok := r.BasicAuth(); ok && (user != "bot" || pass != "secret") {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		if u.realmAnswer != nil {
			u.realmAnswer(w)
			return
		}
		fmt.Fprintf(w, `{"token": "tok-%d", "expires_in": 300}`, n)
	}))
	u.signed = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "" {
			http.Error(w, "a signed URL takes no token", http.StatusBadRequest)
			return
		}
		w.Write(u.blob)
	}))
	u.reg = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodHead {
			u.heads.Add(1)
		} else {
			u.gets.Add(1)
		}
		if !strings.HasPrefix(r.Header.Get("Authorization"), "Bearer tok-") {
			ch := u.challenge
			if ch == "" {
				ch = `Bearer realm="` + u.realm.URL + `/token",service="reg",scope="repository:app:pull"`
			}
			w.Header().Set("WWW-Authenticate", ch)
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		switch r.URL.Path {
		case "/v2/app/blobs/" + u.blobDigest:
			http.Redirect(w, r, u.signed.URL+"/s3/blob?sig=abc", http.StatusTemporaryRedirect)
		case "/v2/app/blobs/sha256:" + strings.Repeat("0", 64):
			http.Redirect(w, r, r.URL.Path, http.StatusTemporaryRedirect) // a loop
		case "/v2/app/manifests/v1":
			w.Header().Set("Docker-Content-Digest", "sha256:"+strings.Repeat("a", 64))
			w.Header().Set("Etag", `"sha256:`+strings.Repeat("a", 64)+`"`)
			w.Write([]byte("{}"))
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(func() { u.realm.Close(); u.reg.Close(); u.signed.Close() })
	return u
}

func (u *upstreamFixture) ref(kind Kind, reference string) *Ref {
	base, _ := url.Parse(u.reg.URL)
	return &Ref{Registry: &policy.Registry{Host: "reg", URL: base}, Kind: kind, Name: "app", Reference: reference}
}

func TestTokensFetchedOncePerScopeAndBlobRedirectFollowed(t *testing.T) {
	u := newUpstream(t)
	c := NewClient(Config{Via: "node-1"})
	ref := u.ref(KindBlob, u.blobDigest)
	u.gate = make(chan struct{})
	var wg sync.WaitGroup
	bodies := make([]string, 8)
	errs := make([]error, 8)
	for i := range 8 {
		wg.Go(func() {
			r := httptest.NewRequest("GET", "/", nil)
			r.Header.Set("Authorization", "Bearer the-clients-own")
			resp, err := c.Fetch(context.Background(), ref, r, nil)
			if err != nil {
				errs[i] = err
				return
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			bodies[i] = string(b)
		})
	}
	// Every request has had its 401 before the realm answers once.
	for u.gets.Load() < 8 {
		runtimeGosched()
	}
	close(u.gate)
	wg.Wait()
	for i := range 8 {
		if errs[i] != nil || bodies[i] != string(u.blob) {
			t.Fatalf("fetch %d: %q %v", i, bodies[i], errs[i])
		}
	}
	if n := u.tokenFetches.Load(); n != 1 {
		t.Fatalf("%d token fetches for one scope, want 1 shared", n)
	}
	// The next request carries the kept token at once: no 401 round trip.
	before := u.gets.Load()
	resp, err := c.Fetch(context.Background(), ref, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if u.gets.Load() != before+1 || u.tokenFetches.Load() != 1 {
		t.Fatalf("a kept token: %d registry requests, %d token fetches", u.gets.Load()-before, u.tokenFetches.Load())
	}
}

func TestRevalidationByHeadCostsNoGet(t *testing.T) {
	u := newUpstream(t)
	c := NewClient(Config{Via: "n"})
	ref := u.ref(KindManifest, "v1")
	same := http.Header{"If-None-Match": {`"sha256:` + strings.Repeat("a", 64) + `"`}}
	resp, err := c.Fetch(context.Background(), ref, nil, same)
	if err != nil || resp.StatusCode != http.StatusNotModified {
		t.Fatalf("unchanged tag: %v %v", resp, err)
	}
	gets := u.gets.Load()
	resp, err = c.Fetch(context.Background(), ref, nil, same)
	if err != nil || resp.StatusCode != http.StatusNotModified || u.gets.Load() != gets {
		t.Fatalf("unchanged tag again: %v %v, %d GETs", resp, err, u.gets.Load()-gets)
	}
	resp, err = c.Fetch(context.Background(), ref, nil, http.Header{"If-None-Match": {`"sha256:` + strings.Repeat("b", 64) + `"`}})
	if err != nil || resp.StatusCode != http.StatusOK || u.gets.Load() != gets+1 {
		t.Fatalf("changed tag: %v %v", resp, err)
	}
	resp.Body.Close()
}

func TestUpstreamAuthFailuresAreNamed(t *testing.T) {
	for _, tc := range []struct {
		name  string
		setup func(u *upstreamFixture)
		want  error
	}{
		{"realm down", func(u *upstreamFixture) { u.realm.Close() }, ErrToken},
		{"realm garbage", func(u *upstreamFixture) {
			u.realmAnswer = func(w http.ResponseWriter) { w.Write([]byte("<html>not json")) }
		}, ErrToken},
		{"realm refuses", func(u *upstreamFixture) {
			u.realmAnswer = func(w http.ResponseWriter) { w.WriteHeader(http.StatusForbidden) }
		}, ErrToken},
		{"malformed challenge", func(u *upstreamFixture) { u.challenge = `Bearer realm="https://x` }, ErrChallenge},
		{"unknown scheme", func(u *upstreamFixture) { u.challenge = `Negotiate` }, ErrChallenge},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u := newUpstream(t)
			tc.setup(u)
			c := NewClient(Config{Via: "n"})
			_, err := c.Fetch(context.Background(), u.ref(KindManifest, "v1"), nil, nil)
			var e *Error
			if !errors.Is(err, tc.want) || !errors.As(err, &e) || e.Status != http.StatusBadGateway {
				t.Fatalf("%v, want a 502 wrapping %v", err, tc.want)
			}
		})
	}
}

func TestRedirectLoopIsNamed(t *testing.T) {
	u := newUpstream(t)
	c := NewClient(Config{Via: "n"})
	_, err := c.Fetch(context.Background(), u.ref(KindBlob, "sha256:"+strings.Repeat("0", 64)), nil, nil)
	if !errors.Is(err, ErrRedirects) {
		t.Fatalf("%v, want ErrRedirects", err)
	}
}

func TestIngestVerifies(t *testing.T) {
	good := []byte(`{"schemaVersion":2}`)
	sum := sha256.Sum256(good)
	d := "sha256:" + hex.EncodeToString(sum[:])
	answer := func(body []byte) *http.Response {
		return &http.Response{StatusCode: 200, Header: http.Header{}, Body: io.NopCloser(strings.NewReader(string(body))), ContentLength: int64(len(body))}
	}
	var failures int
	count := func() { failures++ }
	if err := Ingest(answer(good), &Ref{Kind: KindManifest, Reference: d}, count); err != nil {
		t.Fatal(err)
	}
	if err := Ingest(answer([]byte("tampered")), &Ref{Kind: KindManifest, Reference: d}, count); !errors.Is(err, ErrDigest) || failures != 1 {
		t.Fatalf("tampered manifest: %v (%d failures counted)", err, failures)
	}
	big := answer(nil)
	big.ContentLength = MaxManifestBytes + 1
	if err := Ingest(big, &Ref{Kind: KindManifest, Reference: "v1"}, count); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("big manifest: %v", err)
	}
	chunked := answer([]byte(strings.Repeat("x", MaxManifestBytes+1)))
	chunked.ContentLength = -1
	if err := Ingest(chunked, &Ref{Kind: KindManifest, Reference: "v1"}, count); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("big manifest without a length: %v", err)
	}
	// A small blob of a stated length is checked before it is served: a
	// 502; a larger one (or one of no stated length) streams, and fails
	// at its end.
	small := answer([]byte("tampered"))
	var e *Error
	if err := Ingest(small, &Ref{Kind: KindBlob, Reference: d}, count); !errors.Is(err, ErrDigest) || !errors.As(err, &e) ||
		e.Status != http.StatusBadGateway || failures != 2 {
		t.Fatalf("tampered small blob: %v (%d failures), want a 502 for ErrDigest", err, failures)
	}
	blob := answer([]byte("tampered"))
	blob.ContentLength = -1
	if err := Ingest(blob, &Ref{Kind: KindBlob, Reference: d}, count); err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(io.Discard, blob.Body); !errors.Is(err, ErrDigest) || failures != 3 {
		t.Fatalf("tampered streamed blob read whole: %v (%d failures)", err, failures)
	}
}

// max_connections: a fetch holds its slot until its body is closed; at the
// bound, another waits within its context and fails naming the cap.
func TestConnectionCapHoldsASlotPerBody(t *testing.T) {
	var asked atomic.Int64
	reg := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		asked.Add(1)
		w.Write([]byte("{}"))
	}))
	t.Cleanup(reg.Close)
	base, _ := url.Parse(reg.URL)
	ref := &Ref{Registry: &policy.Registry{Host: "reg", URL: base, MaxConnections: 1}, Kind: KindManifest, Name: "app", Reference: "v1"}
	c := NewClient(Config{Via: "n"})
	first, err := c.Fetch(context.Background(), ref, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	done, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := c.Fetch(done, ref, nil, nil); err == nil || !strings.Contains(err.Error(), "max_connections") {
		t.Fatalf("a fetch past the cap: %v, want it to wait for a slot and fail naming max_connections", err)
	}
	first.Body.Close()
	second, err := c.Fetch(context.Background(), ref, nil, nil)
	if err != nil {
		t.Fatalf("a fetch after the slot was freed: %v", err)
	}
	second.Body.Close()
	if n := asked.Load(); n != 2 {
		t.Fatalf("the registry was asked %d times, want 2 (the one past the cap never sent)", n)
	}
}

// bandwidth: a token bucket of a second's bytes; what is read past it is
// owed, and the wait is what the debt takes at the rate.
func TestBandwidthCapOwesWhatIsReadPastTheRate(t *testing.T) {
	l := newRateLimit(1000)
	t0 := l.last
	if d := l.take(1000, t0); d != 0 {
		t.Fatalf("a second's bytes at once: wait %v, want none", d)
	}
	if d := l.take(500, t0); d != 500*time.Millisecond {
		t.Fatalf("500 bytes past the rate: wait %v, want 500ms", d)
	}
	if d := l.take(0, t0.Add(500*time.Millisecond)); d != 0 {
		t.Fatalf("after the debt is paid: wait %v, want none", d)
	}
	if d := l.take(0, t0.Add(time.Hour)); d != 0 || l.avail != 1000 {
		t.Fatalf("after an hour idle: %v available (wait %v), want at most a second's 1000", l.avail, d)
	}
	// A read asks for at most a tenth of a second's bytes.
	r := &limitedReader{r: strings.NewReader(strings.Repeat("x", 5000)), rate: newRateLimit(1000), ctx: context.Background()}
	if n, err := r.Read(make([]byte, 5000)); err != nil || n != 101 {
		t.Fatalf("one read: %d bytes, %v; want 101", n, err)
	}
}
