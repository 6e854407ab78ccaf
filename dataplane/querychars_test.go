package dataplane

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

// A path's bytes outside ASCII reach the origin escaped (Go's client
// writes /café as /caf%C3%A9) and are keyed so; a query's went to the
// origin raw and were keyed raw, apart from the same query escaped, as a
// browser sends it: two objects for one resource, and a purge of the URL
// as browsers and operators spell it left the raw one served. A query
// is keyed and sent with such bytes escaped (RFC 3987 3.1), as the path
// is.
func TestQueryBytesOutsideASCIIAreOneKeyWithTheirEscapes(t *testing.T) {
	var mu sync.Mutex
	var seen []string
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.RequestURI)
		mu.Unlock()
		w.Header().Set("Cache-Control", "public, max-age=600")
		w.Write([]byte("found"))
	}))
	defer origin.Close()
	_, n := startOne(t, origin.URL, noHotKeys)
	addr := n.ClientAddr().String()
	for i, target := range []string{"/search?q=caf\u00e9", "/search?q=caf%c3%a9", "/search?q=caf%C3%A9"} {
		got := raw(t, addr, "GET "+target+" HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
		want := map[bool]string{true: "MISS", false: "HIT"}[i == 0]
		if !strings.HasPrefix(got, "HTTP/1.1 200 ") || !strings.Contains(got, "\r\nX-Cache: "+want+"\r\n") {
			t.Errorf("GET %s: %q, want a %s", target, got, want)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != 1 || seen[0] != "/search?q=caf%C3%A9" {
		t.Errorf("the origin was sent %q, want one /search?q=caf%%C3%%A9", seen)
	}
}
