package dataplane

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestExpandedBodyOverMaxObjectIsNotStored: a textual answer the node
// stores zstd-coded is bounded by MaxObjectBytes as the origin's bytes,
// not as the few the store keeps: a small gzip transfer-coded body that
// expands to 8 MiB, or 8 MiB sent chunked, is passed to the client whole
// and not stored, as it would not be with its Content-Length.
func TestExpandedBodyOverMaxObjectIsNotStored(t *testing.T) {
	text := strings.Repeat("shardcache expands this line\n", (8<<20)/29)
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write([]byte(text))
	zw.Close()
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/chunked" {
			w.Header().Set("Content-Type", "text/plain")
			w.Header().Set("Cache-Control", "max-age=60")
			w.(http.Flusher).Flush() // no Content-Length: chunked
			w.Write([]byte(text))
			return
		}
		c, bw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer c.Close()
		fmt.Fprintf(bw, "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nCache-Control: max-age=60\r\nConnection: close\r\n"+
			"Transfer-Encoding: gzip, chunked\r\n\r\n%x\r\n%s\r\n0\r\n\r\n", gz.Len(), gz.Bytes())
		bw.Flush()
	}))
	defer origin.Close()
	_, n := startOne(t, origin.URL) // MaxObjectBytes 1 MiB
	for _, path := range []string{"/bomb", "/chunked"} {
		for _, want := range []string{"MISS", "MISS"} {
			resp, body := do(t, "GET", "http://"+n.ClientAddr().String()+path)
			if resp.StatusCode != http.StatusOK || body != text {
				t.Fatalf("%s: %d, %d bytes; want 200 and the origin's %d", path, resp.StatusCode, len(body), len(text))
			}
			if got := resp.Header.Get("X-Cache"); got != want {
				t.Fatalf("%s: X-Cache %s, want %s: %d bytes are over MaxObjectBytes", path, got, want, len(text))
			}
		}
	}
}
