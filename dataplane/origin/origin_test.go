package origin

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/shardcache/shardcache/dataplane/relay"
)

func mustURL(t *testing.T, s string) *url.URL {
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
	r.Header.Set(relay.HopHeader, "node-2")
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
			if h.Get("X-Drop") != "" || h.Get("Connection") != "" || h.Get(relay.HopHeader) != "" {
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
	down.Close() // refuses connections
	var got []string
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = append(got, r.Method)
		b, _ := io.ReadAll(r.Body)
		io.WriteString(w, "up:"+string(b))
	}))
	defer up.Close()
	c := New(Config{Default: mustURL(t, up.URL)})
	origins := []*url.URL{mustURL(t, down.URL), mustURL(t, up.URL)}

	r := httptest.NewRequest(http.MethodGet, "http://shop.example/x", nil)
	resp, err := c.Fetch(context.Background(), r, origins, true, nil)
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
	if _, err := c.Fetch(context.Background(), r, origins, false, nil); err == nil {
		t.Fatal("a POST with a body was retried on the next origin")
	}
	// Without origins of its own, the default one.
	r = httptest.NewRequest(http.MethodGet, "http://shop.example/x", nil)
	if resp, err := c.Fetch(context.Background(), r, nil, true, nil); err != nil {
		t.Fatal(err)
	} else {
		resp.Body.Close()
	}
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
