package h1

import (
	"io"
	"net/http"
	"strings"
	"testing"
)

// An HTTP/1.0 client knows no interim answer (RFC 9110 15.2): it, or an
// HTTP/1.0 proxy before the node, would take a 103 for the answer, and
// the answer for the next request's. None is sent to it.
func TestNoInterimAnswerToAnHTTP10Client(t *testing.T) {
	addr, _ := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Link", "</s.css>; rel=preload")
		w.WriteHeader(http.StatusEarlyHints)
		w.Header().Del("Link")
		io.WriteString(w, "ok "+r.URL.Path)
	}))
	got := exchange(t, addr, "GET /1 HTTP/1.0\r\nConnection: keep-alive\r\n\r\nGET /2 HTTP/1.0\r\n\r\n")
	if !strings.HasPrefix(got, "HTTP/1.1 200 OK\r\n") || strings.Contains(got, " 103 ") || strings.Count(got, "HTTP/1.1 200 OK\r\n") != 2 ||
		!strings.HasSuffix(got, "ok /2") {
		t.Fatalf("answers %q, want two 200s and no 103", got)
	}
	// HTTP/1.1 clients still get it.
	if got := exchange(t, addr, "GET /1 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"); !strings.HasPrefix(got, "HTTP/1.1 103 Early Hints\r\nLink: ") {
		t.Fatalf("HTTP/1.1 answer %q, want the 103 first", got)
	}
}
