package dataplane

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"
)

// reflectingOrigin answers with the request fields an origin framework
// would build a page from, and records every request it sees.
type reflectingOrigin struct {
	mu   sync.Mutex
	seen []string // method and path of each request
}

func (o *reflectingOrigin) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	o.mu.Lock()
	o.seen = append(o.seen, r.Method+" "+r.URL.Path)
	o.mu.Unlock()
	w.Header().Set("Cache-Control", "public, max-age=600")
	host := r.Header.Get("X-Forwarded-Host")
	if host == "" {
		host = r.Host
	}
	io.WriteString(w, "link=https://"+host+r.URL.Path+" proto="+r.Header.Get("X-Forwarded-Proto")+" override="+r.Header.Get("X-Http-Method-Override"))
}

func (o *reflectingOrigin) requests() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]string(nil), o.seen...)
}

// raw sends bytes on a new connection to addr and returns what comes back
// until the server closes it or 5 s pass.
func raw(t *testing.T, addr, req string) string {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c, req); err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(c)
	return string(b)
}

func TestHostileRequests(t *testing.T) {
	o := &reflectingOrigin{}
	origin := httptest.NewServer(o)
	defer origin.Close()
	a, _, _ := startPair(t, origin.URL, noHotKeys, func(c *Config) { c.ClientHeaderTimeout = 300 * time.Millisecond })
	addr := a.ClientAddr().String()
	base := "http://" + addr

	t.Run("conflicting Content-Length and Transfer-Encoding", func(t *testing.T) {
		// Read by its Transfer-Encoding (RFC 9112 6.1), answered, and the
		// connection closed: what a Content-Length reader would take for
		// the body is never taken for a request.
		got := raw(t, addr, "POST /smuggle HTTP/1.1\r\nHost: x\r\nContent-Length: 40\r\nTransfer-Encoding: chunked\r\n\r\n"+
			"0\r\n\r\nGET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n")
		if !strings.HasPrefix(got, "HTTP/1.1 200") || !strings.Contains(got, "\r\nConnection: close\r\n") || strings.Count(got, "HTTP/1.1 ") != 1 {
			t.Errorf("answer %q: want one answer, then the connection closed", got)
		}
		for _, s := range o.requests() {
			if strings.Contains(s, "smuggled") {
				t.Errorf("the origin saw %q", s)
			}
		}
	})
	t.Run("two Content-Lengths", func(t *testing.T) {
		got := raw(t, addr, "POST /twice HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nContent-Length: 2\r\nConnection: close\r\n\r\nab")
		if !strings.HasPrefix(got, "HTTP/1.1 400") {
			t.Errorf("answer %q, want 400", firstLine(got))
		}
	})
	t.Run("oversized header and URL", func(t *testing.T) {
		big := strings.Repeat("a", 100<<10)
		for name, req := range map[string]string{
			"header": "GET /h HTTP/1.1\r\nHost: x\r\nX-Big: " + big + "\r\nConnection: close\r\n\r\n",
			"URL":    "GET /" + big + " HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
		} {
			if got := raw(t, addr, req); !strings.HasPrefix(got, "HTTP/1.1 431") {
				t.Errorf("oversized %s: answer %q, want 431", name, firstLine(got))
			}
		}
	})
	t.Run("slow header (slowloris)", func(t *testing.T) {
		start := time.Now()
		got := raw(t, addr, "GET /slow HTTP/1.1\r\nHost: x\r\nX-A: 1\r\n") // and nothing more
		if time.Since(start) > 4*time.Second {
			t.Fatalf("a client that never finishes its header held the connection %s", time.Since(start))
		}
		if got != "" && !strings.HasPrefix(got, "HTTP/1.1 408") {
			t.Errorf("answer %q, want the connection closed", firstLine(got))
		}
	})
	t.Run("path climbing above the root", func(t *testing.T) {
		for _, p := range []string{"/../etc/passwd", "/a/../../etc/passwd", "/%2e%2e/etc/passwd"} {
			got := raw(t, addr, "GET "+p+" HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
			if !strings.HasPrefix(got, "HTTP/1.1 400") {
				t.Errorf("GET %s: answer %q, want 400", p, firstLine(got))
			}
		}
		for _, s := range o.requests() {
			if strings.Contains(s, "passwd") {
				t.Errorf("the origin saw %q", s)
			}
		}
	})
	t.Run("targets that name no resource of the origin", func(t *testing.T) {
		// Go's URL parser reads GET victim:80 as the opaque URL
		// "victim:80": it was keyed apart from the "/" the origin was
		// sent. CONNECT was passed to the origin, whose 2xx would have
		// made a proxy in front tunnel what followed, unchecked.
		before := len(o.requests())
		for _, tc := range []struct{ line, status string }{
			{"GET victim:80", "400"}, {"GET http:x", "400"}, {"GET mailto:a@b", "400"},
			{"GET *", "400"}, {"OPTIONS *", "400"}, {"GET ftp://x/f", "400"},
			{"GET http://user:secret@x/u", "400"}, {"CONNECT victim:443", "501"},
		} {
			got := raw(t, addr, tc.line+" HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
			if !strings.HasPrefix(got, "HTTP/1.1 "+tc.status+" ") || strings.Contains(got, "secret") {
				t.Errorf("%s: answer %q, want %s naming the problem", tc.line, got, tc.status)
			}
		}
		if seen := o.requests()[before:]; len(seen) != 0 {
			t.Errorf("the origin saw %v", seen)
		}
		// An absolute URL with no path is "/", keyed as "/" is.
		_, port, _ := net.SplitHostPort(addr)
		got := raw(t, addr, "GET http://x HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
		if !strings.HasPrefix(got, "HTTP/1.1 200 ") || !strings.Contains(got, "link=https://x:"+port+"/ ") {
			t.Fatalf("GET http://x: %q", got)
		}
		if got := raw(t, addr, "GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"); !strings.Contains(got, "\r\nX-Cache: HIT\r\n") {
			t.Errorf("GET / after GET http://x: %q, want the same object, a hit", got)
		}
	})
	t.Run("a port in Host is neither keyed nor sent on", func(t *testing.T) {
		// The key leaves the port out; the origin was sent the client's (in
		// X-Forwarded-Host, Forwarded, and Host under origin_host client),
		// so links an origin built from it were served from the cache to
		// every client of the host. It is sent the node's public port.
		_, port, _ := net.SplitHostPort(addr)
		want := "link=https://victim.example:" + port + "/port/page "
		got := raw(t, addr, "GET /port/page HTTP/1.1\r\nHost: victim.example:1337\r\nConnection: close\r\n\r\n")
		if !strings.HasPrefix(got, "HTTP/1.1 200 ") || strings.Contains(got, "1337") || !strings.Contains(got, want) {
			t.Fatalf("the origin was not sent the node's port alone: %q", got)
		}
		got = raw(t, addr, "GET /port/page HTTP/1.1\r\nHost: victim.example\r\nConnection: close\r\n\r\n")
		if !strings.Contains(got, "\r\nX-Cache: HIT\r\n") || !strings.Contains(got, want) {
			t.Errorf("another client of the host: %q, want the same object, a hit", got)
		}
	})
	t.Run("an HTTP/1.0 request without Host names no host", func(t *testing.T) {
		// The node's public port alone (":8080") was sent as the host in
		// X-Forwarded-Host and Forwarded, and keyed as one. The origin now
		// gets no X-Forwarded-Host and links to its own host.
		got := raw(t, addr, "GET /nohost/page HTTP/1.0\r\n\r\n")
		if !strings.HasPrefix(got, "HTTP/1.1 200 ") || !strings.Contains(got, "/nohost/page ") || strings.Contains(got, "link=https://:") {
			t.Fatalf("GET without Host: %q, want the origin sent no host", got)
		}
	})
	t.Run("a dot segment with a parameter", func(t *testing.T) {
		// Tomcat, Jetty and Spring read /static/..;/account as /account:
		// keyed under /static/, a signed-in client's page would be stored
		// where an attacker reads it.
		before := len(o.requests())
		for _, p := range []string{"/static/..;/account", "/static/.;x/a", "/a/%2e%2e;/b"} {
			if got := raw(t, addr, "GET "+p+" HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"); !strings.HasPrefix(got, "HTTP/1.1 400 ") {
				t.Errorf("GET %s: answer %q, want 400", p, firstLine(got))
			}
		}
		if seen := o.requests()[before:]; len(seen) != 0 {
			t.Errorf("the origin saw %v", seen)
		}
		if resp, _ := do(t, "GET", base+"/a/b;v=1/..x;y"); resp.StatusCode != 200 {
			t.Errorf("parameters on other segments: %d, want 200", resp.StatusCode)
		}
	})
	t.Run("dot segments share the resource's key", func(t *testing.T) {
		before := len(o.requests())
		for _, p := range []string{"/dots/x", "/dots/y/../x", "/dots/./x", "/dots/%2e/x"} {
			resp, body := do(t, "GET", base+p)
			if resp.StatusCode != 200 || !strings.Contains(body, "/dots/x ") {
				t.Fatalf("GET %s: %d %q", p, resp.StatusCode, body)
			}
		}
		if got := o.requests()[before:]; len(got) != 1 || got[0] != "GET /dots/x" {
			t.Errorf("the origin saw %v, want one GET /dots/x", got)
		}
	})
	t.Run("unkeyed rewrite headers cannot poison the cache", func(t *testing.T) {
		resp, body := do(t, "GET", base+"/page", "X-Forwarded-Host", "evil.example", "X-Forwarded-Proto", "https",
			"X-HTTP-Method-Override", "DELETE")
		// The origin sees the node's own account: the Host and the
		// scheme the client used.
		if resp.StatusCode != 200 || strings.Contains(body, "evil") || strings.Contains(body, "DELETE") || !strings.Contains(body, " proto=http ") {
			t.Fatalf("the origin was given the client's rewrite headers: %q", body)
		}
		if _, body := do(t, "GET", base+"/page"); strings.Contains(body, "evil") {
			t.Fatalf("a later client got %q", body)
		}
	})
	t.Run("spoofed hop and internal headers are ignored", func(t *testing.T) {
		for _, h := range [][]string{
			{"X-Shardcache-Hop", "b"}, {"X-Shardcache-Handoff", "1"}, {"X-Shardcache-Slice", "0/65536"},
			{"X-Shardcache-Hot-Keys", "10"}, {"X-Shardcache-Invalidate", "1"}, {"X-Shardcache-Precopy", "1"},
		} {
			resp, body := do(t, "GET", base+"/spoof", h...)
			if resp.StatusCode != 200 || !strings.HasPrefix(body, "link=") {
				t.Errorf("%s: %d %q, want the object", h[0], resp.StatusCode, body)
			}
		}
	})
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\r\n")
	return line
}

// The scheme is part of the key: a trusted proxy's X-Forwarded-Proto (or
// Forwarded proto=) selects the https variant, through the owner and a
// relaying node; from anyone else it is dropped and the request is http.
func TestSchemeComesFromTrustedProxiesOnly(t *testing.T) {
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=60")
		io.WriteString(w, "seen proto "+r.Header.Get("X-Forwarded-Proto"))
	}))
	defer origin.Close()
	trust := func(c *Config) {
		c.TrustedProxies = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}
		c.HotThreshold = -1
	}
	a, b, e := startPair(t, origin.URL, trust)
	for _, via := range []*Node{b, a} { // b owns the path; a relays to it
		path := pathOwnedBy(t, e, "/scheme/"+via.ID()+"/", "b")
		url := "http://" + via.ClientAddr().String() + path
		if _, body := do(t, "GET", url, "X-Forwarded-Proto", "https"); body != "seen proto https" {
			t.Fatalf("via %s, https first: %q", via.ID(), body)
		}
		resp, body := do(t, "GET", url)
		if body != "seen proto http" || resp.Header.Get("X-Cache") != "MISS" {
			t.Fatalf("via %s, a plain http request after the https one: %s %q; want its own MISS", via.ID(), resp.Header.Get("X-Cache"), body)
		}
		if resp, body := do(t, "GET", url, "Forwarded", "for=192.0.2.1;proto=https"); body != "seen proto https" || resp.Header.Get("X-Cache") != "HIT" {
			t.Fatalf("via %s, Forwarded proto=https: %s %q; want the https variant's HIT", via.ID(), resp.Header.Get("X-Cache"), body)
		}
	}
	// Without trusted proxies the field is dropped: one key for both.
	_, n := startOne(t, origin.URL)
	url := "http://" + n.ClientAddr().String() + "/scheme/untrusted"
	do(t, "GET", url, "X-Forwarded-Proto", "https")
	if resp, body := do(t, "GET", url); resp.Header.Get("X-Cache") != "HIT" || body != "seen proto http" {
		t.Fatalf("an untrusted client's X-Forwarded-Proto: %s %q; want one shared key, the node's own scheme seen", resp.Header.Get("X-Cache"), body)
	}
}
