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

// An interim answer carries no framing (RFC 9110 8.6, RFC 9112 6.1: no
// Content-Length or Transfer-Encoding in a 1xx) and no Connection: a
// proxy before the node that took them at their word would read the
// answer after it as a body, or close. An origin's 103 passed on may
// carry any of them.
func TestAnInterimAnswerCarriesNoFraming(t *testing.T) {
	addr, _ := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hints := map[string]string{"Link": "</s.css>; rel=preload", "Content-Length": "5", "Transfer-Encoding": "chunked", "Connection": "close"}
		for k, v := range hints {
			w.Header().Set(k, v)
		}
		w.WriteHeader(http.StatusEarlyHints)
		for k := range hints {
			w.Header().Del(k)
		}
		io.WriteString(w, "ok "+r.URL.Path)
	}))
	got := exchange(t, addr, "GET /1 HTTP/1.1\r\nHost: x\r\n\r\nGET /2 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
	interim, _, _ := strings.Cut(got, "\r\n\r\n")
	if !strings.HasPrefix(interim, "HTTP/1.1 103 Early Hints\r\n") || !strings.Contains(interim, "\r\nLink: ") ||
		strings.Contains(interim, "Content-Length") || strings.Contains(interim, "Transfer-Encoding") || strings.Contains(interim, "Connection") {
		t.Fatalf("interim answer %q, want the 103 with its Link and no framing", interim)
	}
	if !strings.HasSuffix(got, "ok /2") {
		t.Fatalf("answers %q: want both requests answered on the connection", got)
	}
}
