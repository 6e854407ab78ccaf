package origin

import (
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"

	"go.uber.org/goleak"

	"github.com/shardcache/shardcache/dataplane/hop"
	"github.com/shardcache/shardcache/dataplane/httpcache"
	"github.com/shardcache/shardcache/sdk/policy"
)

func mustURL(t testing.TB, s string) *url.URL {
	t.Helper()
	u, err := url.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

func TestRequestRewritesForTheOrigin(t *testing.T) {
	c := New(Config{Default: mustURL(t, "http://origin.example"), Via: "node-1"})
	r := httptest.NewRequest(http.MethodHead, "http://shop.example/a%2Fb/c?x=1", nil)
	r.Header.Set("Connection", "X-Drop")
	r.Header.Set("X-Drop", "1")
	r.Header.Set(hop.Marker, "node-2")
	r.Header.Set("If-None-Match", `"v1"`)
	r.Header.Set("Range", "bytes=0-1")
	r.Header.Set("Via", "1.1 edge")
	r.Header.Set("X-Forwarded-For", "192.0.2.1")
	for _, tt := range []struct {
		name         string
		fill         bool
		method       string
		conditionals bool
	}{
		{"a fill: a whole-object GET", true, http.MethodGet, false},
		{"a bypass: the client's request", false, http.MethodHead, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			req, err := c.Request(context.Background(), r, mustURL(t, "http://origin.example/base/"), tt.fill)
			if err != nil {
				t.Fatal(err)
			}
			if req.Method != tt.method || req.URL.String() != "http://origin.example/base/a%2Fb/c?x=1" {
				t.Fatalf("%s %s", req.Method, req.URL)
			}
			h := req.Header
			if h.Get("Via") != "1.1 edge, 1.1 node-1" || h.Get("X-Forwarded-For") != "192.0.2.1" {
				t.Fatalf("Via %q, X-Forwarded-For %q", h.Get("Via"), h.Get("X-Forwarded-For"))
			}
			if h.Get("X-Drop") != "" || h.Get("Connection") != "" || h.Get(hop.Marker) != "" {
				t.Fatalf("hop-by-hop or internal fields reached the origin: %v", h)
			}
			if got := h.Get("If-None-Match") != "" && h.Get("Range") != ""; got != tt.conditionals {
				t.Fatalf("conditionals sent: %t, want %t", got, tt.conditionals)
			}
		})
	}
}

func TestFetchFailsOverToTheNextOrigin(t *testing.T) {
	down := httptest.NewServer(http.NotFoundHandler())
	down.Close()      // refuses connections
	var mu sync.Mutex // the handler runs on the server's goroutines
	var got []string
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = append(got, r.Method)
		mu.Unlock()
		b, _ := io.ReadAll(r.Body)
		io.WriteString(w, "up:"+string(b))
	}))
	defer up.Close()
	c := New(Config{Default: mustURL(t, up.URL)})
	origins := []*url.URL{mustURL(t, down.URL), mustURL(t, up.URL)}

	r := httptest.NewRequest(http.MethodGet, "http://shop.example/x", nil)
	resp, err := c.Fetch(context.Background(), r, &policy.Policy{Origins: origins}, true, nil)
	if err != nil {
		t.Fatalf("fill with the first origin down: %v", err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(b) != "up:" {
		t.Fatalf("answer %q", b)
	}

	// A bypass with a body is not sent again: the first attempt may have
	// read it.
	r = httptest.NewRequest(http.MethodPost, "http://shop.example/x", strings.NewReader("order"))
	if _, err := c.Fetch(context.Background(), r, &policy.Policy{Origins: origins}, false, nil); err == nil {
		t.Fatal("a POST with a body was retried on the next origin")
	}
	// Without origins of its own, the default one.
	r = httptest.NewRequest(http.MethodGet, "http://shop.example/x", nil)
	if resp, err := c.Fetch(context.Background(), r, policy.Default, true, nil); err != nil {
		t.Fatal(err)
	} else {
		resp.Body.Close()
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 2 {
		t.Fatalf("the origin saw %v, want two GETs", got)
	}
	c.CloseIdle()
}

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func TestTransferCodings(t *testing.T) {
	tests := []struct {
		lines []string
		want  string // codings joined by ","; "error" for a refusal
	}{
		{[]string{"chunked"}, "chunked"},
		{[]string{"GZIP, Chunked"}, "gzip,chunked"},
		{[]string{"gzip", "chunked"}, "gzip,chunked"},
		{[]string{"gzip;level=9 , chunked"}, "gzip,chunked"},
		{[]string{"gzip"}, "gzip"},
		{[]string{" , gzip,, chunked"}, "gzip,chunked"},
		{[]string{"chunked, gzip"}, "error"},      // chunked must be last
		{[]string{"chunked", "chunked"}, "error"}, // and only once
		{[]string{"gz@ip, chunked"}, "error"},
		{[]string{`"gzip", chunked`}, "error"},
	}
	for _, tt := range tests {
		got, err := transferCodings(tt.lines)
		s := strings.Join(got, ",")
		if err != nil {
			s = "error"
		}
		if s != tt.want {
			t.Errorf("%q: %s (%v), want %s", tt.lines, s, err, tt.want)
		}
	}
}

// TestOriginHostAndLocations: the origin gets its own Host, or the
// client's under origin_host "client"; a Location or Content-Location that
// points at the origin comes back as a path-absolute reference, which the
// client resolves against the node it asked (nginx's proxy_redirect
// default); one pointing elsewhere is left alone.
func TestOriginHostAndLocations(t *testing.T) {
	var mu sync.Mutex // the handler runs on the server's goroutines
	var hosts []string
	lastHost := func() string {
		mu.Lock()
		defer mu.Unlock()
		return hosts[len(hosts)-1]
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		hosts = append(hosts, r.Host)
		mu.Unlock()
		switch r.URL.Query().Get("to") {
		case "origin":
			w.Header().Set("Location", "http://"+r.Host+"/base/v2/app/blobs/uploads/u1?_state=x")
			w.Header().Set("Content-Location", "http://"+r.Host+"/base/v2/app/manifests/sha256:1")
		case "outside":
			w.Header().Set("Location", "http://"+r.Host+"/elsewhere/x")
		case "other":
			w.Header().Set("Location", "https://cdn.example/x")
		}
		w.WriteHeader(http.StatusAccepted)
	}))
	defer srv.Close()
	base := mustURL(t, srv.URL+"/base")
	c := New(Config{Default: base})
	fetch := func(p *policy.Policy, to string) http.Header {
		t.Helper()
		r := httptest.NewRequest(http.MethodPost, "http://node.example:8080/v2/app/blobs/uploads/?to="+to, nil)
		resp, err := c.Fetch(context.Background(), r, p, false, nil)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.Header
	}
	h := fetch(policy.Default, "origin")
	if got := h.Get("Location"); got != "/v2/app/blobs/uploads/u1?_state=x" {
		t.Errorf("Location %q, want the path under the origin's base, with its query", got)
	}
	if got := h.Get("Content-Location"); got != "/v2/app/manifests/sha256:1" {
		t.Errorf("Content-Location %q", got)
	}
	if got := fetch(policy.Default, "outside").Get("Location"); got != "http://"+base.Host+"/elsewhere/x" {
		t.Errorf("a Location outside the origin's base became %q; want it untouched", got)
	}
	if got := fetch(policy.Default, "other").Get("Location"); got != "https://cdn.example/x" {
		t.Errorf("a Location on another host became %q", got)
	}
	if got := lastHost(); got != base.Host {
		t.Errorf("origin got Host %q by default, want its own %q", got, base.Host)
	}
	fetch(&policy.Policy{ClientHost: true}, "origin")
	if got := lastHost(); got != "node.example:8080" {
		t.Errorf("origin got Host %q under origin_host client, want the client's", got)
	}
}

// TestTransferEncodingsNetHTTPRefuses: net/http's client refuses a
// response whose Transfer-Encoding is more than one "chunked" (a list, or
// two field lines); Fetch reads such a response on a connection of its own
// and returns its decoded content. A coding the node cannot decode is an
// error that Proxy-Status names as a transfer-coding error, as is a
// refused one on a request with a body, which cannot be sent again.
func TestTransferEncodingsNetHTTPRefuses(t *testing.T) {
	gz := func(s string) string {
		var b strings.Builder
		zw := gzip.NewWriter(&b)
		io.WriteString(zw, s)
		zw.Close()
		return b.String()
	}
	chunked := func(s string) string { return fmt.Sprintf("%x\r\n%s\r\n0\r\n\r\n", len(s), s) }
	answers := map[string]string{
		"/list":     "Transfer-Encoding: gzip, chunked\r\n\r\n" + chunked(gz("coded body")),
		"/lines":    "Transfer-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n\r\n" + chunked(gz("two lines")),
		"/compress": "Transfer-Encoding: compress, chunked\r\n\r\n" + chunked("not compressed"),
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		c, bw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer c.Close()
		bw.WriteString("HTTP/1.1 200 OK\r\nCache-Control: max-age=60\r\nConnection: close\r\n" + answers[r.URL.Path])
		bw.Flush()
	}))
	defer srv.Close()

	plain := &http.Transport{}
	defer plain.CloseIdleConnections()
	for _, path := range []string{"/list", "/lines"} {
		resp, err := (&http.Client{Transport: plain}).Get(srv.URL + path)
		if err == nil {
			resp.Body.Close()
			t.Fatalf("%s: net/http's client took the answer; the coded path is not needed for it", path)
		}
		if !unsupportedTE(err) {
			t.Fatalf("%s: net/http's client: %v, not the refusal the coded path looks for", path, err)
		}
	}

	c := New(Config{Default: mustURL(t, srv.URL)})
	defer c.CloseIdle()
	fetch := func(method, path string, body io.Reader) (*http.Response, error) {
		r := httptest.NewRequest(method, "http://shop.example"+path, body)
		return c.Fetch(context.Background(), r, policy.Default, method == http.MethodGet, nil)
	}
	for path, want := range map[string]string{"/list": "coded body", "/lines": "two lines"} {
		resp, err := fetch(http.MethodGet, path, nil)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || string(b) != want || resp.StatusCode != 200 || resp.ContentLength != -1 ||
			resp.Header.Get("Transfer-Encoding") != "" || resp.Header.Get("Cache-Control") != "max-age=60" {
			t.Fatalf("%s: %d, %q (%v), length %d, header %v", path, resp.StatusCode, b, err, resp.ContentLength, resp.Header)
		}
	}

	for _, tt := range []struct {
		method, path, body, details string
	}{
		{http.MethodGet, "/compress", "", `transfer coding "compress", which shardcache cannot decode`},
		{http.MethodPost, "/list", "order", `unsupported transfer encoding: "gzip, chunked"`},
	} {
		var body io.Reader
		if tt.body != "" {
			body = strings.NewReader(tt.body)
		}
		resp, err := fetch(tt.method, tt.path, body)
		if err == nil {
			resp.Body.Close()
			t.Fatalf("%s %s: answered", tt.method, tt.path)
		}
		if !errors.Is(err, httpcache.ErrTransferCoding) || httpcache.ErrorType(err) != "http_response_transfer_coding" ||
			!strings.Contains(httpcache.ErrorDetails(err), tt.details) {
			t.Fatalf("%s %s: %v: type %s, details %q; want http_response_transfer_coding naming %s",
				tt.method, tt.path, err, httpcache.ErrorType(err), httpcache.ErrorDetails(err), tt.details)
		}
	}
}
