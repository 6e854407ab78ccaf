package h1

import (
	"bufio"
	"bytes"
	"net/http"
	"slices"
	"testing"
)

// FuzzHeadAgainstNetHTTP holds the parser to never taking a head that
// net/http's refuses, and to reading what both take the same way: the
// method, the target, the Host, the URL and every field value.
func FuzzHeadAgainstNetHTTP(f *testing.F) {
	for _, s := range []string{
		"GET / HTTP/1.1\r\nHost: x\r\n\r\n",
		"GET /a?b=c HTTP/1.1\r\nHost: x\r\nAccept: a\r\naccept: b\r\n\r\n",
		"POST /u HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nContent-Length: 3\r\n\r\n",
		"POST /u HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n",
		"GET http://h.example/p%2Fq HTTP/1.1\r\nHost: x\r\n\r\n",
		"GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n",
		"OPTIONS * HTTP/1.1\r\nHost: x\r\n\r\n",
		"CONNECT h.example:443 HTTP/1.1\r\nHost: h.example:443\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: x\r\nX-A: \t v \t\r\n\r\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		end := bytes.Index(raw, []byte("\r\n\r\n"))
		if end < 0 || bytes.HasPrefix(raw, []byte("\r\n")) {
			return
		}
		raw = raw[:end+4]
		var blk block
		h, es := parseHead(bytes.Clone(raw), &blk)
		if es == nil {
			es = parseTarget(h.method, h.target, &blk.url)
		}
		if es != nil {
			return // refused: stricter than net/http is allowed
		}
		req, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(raw)))
		if err != nil {
			t.Fatalf("took a head net/http refuses (%v): %q", err, raw)
		}
		host := h.host
		if blk.url.Host != "" {
			host = blk.url.Host
		}
		if req.Method != h.method || req.RequestURI != h.target || req.Host != host || req.URL.String() != blk.url.String() {
			t.Fatalf("%q: read %s %s host %q URL %q; net/http %s %s host %q URL %q", raw,
				h.method, h.target, host, blk.url.String(), req.Method, req.RequestURI, req.Host, req.URL.String())
		}
		for k, v := range h.header {
			if !slices.Equal(req.Header[k], v) {
				t.Fatalf("%q: field %s %q; net/http %q", raw, k, v, req.Header[k])
			}
		}
		for k := range req.Header {
			if _, ok := h.header[k]; !ok && k != "Content-Length" {
				t.Fatalf("%q: field %s lost", raw, k)
			}
		}
	})
}
