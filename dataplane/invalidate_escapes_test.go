package dataplane

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// An unsafe request's success drops what is stored for its URL, spelled
// as the node keys it: a raw path's escapes kept beside its escaped UTF-8
// (/a%2Fb/café is keyed /a%2Fb/caf%C3%A9 since cfdc53c). The invalidation
// rebuilt the URL from the decoded path alone, /a/b/caf%C3%A9, and so
// dropped nothing: the GET went on being served from the cache after a
// successful POST to it.
func TestAPOSTInvalidatesARawPathWithAnEscapedSlash(t *testing.T) {
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet {
			w.Header().Set("Cache-Control", "max-age=3600")
		}
		w.Write([]byte(r.Method + " " + r.URL.EscapedPath()))
	}))
	defer origin.Close()
	_, n := startOne(t, origin.URL, noHotKeys)
	addr := n.ClientAddr().String()
	const target = "/a%2Fb/caf\u00e9"
	send := func(method string) string {
		return raw(t, addr, method+" "+target+" HTTP/1.1\r\nHost: shop.test\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
	}
	send("GET")
	if got := send("GET"); !strings.Contains(got, "\r\nX-Cache: HIT\r\n") {
		t.Fatalf("setup: GET %s again: %q, want a hit", target, got)
	}
	if got := send("POST"); !strings.HasPrefix(got, "HTTP/1.1 200 ") {
		t.Fatalf("setup: POST %s: %q", target, got)
	}
	if got := send("GET"); strings.Contains(got, "\r\nX-Cache: HIT\r\n") {
		t.Errorf("GET %s after a successful POST to it: %q, want it looked up anew", target, got)
	}
}
