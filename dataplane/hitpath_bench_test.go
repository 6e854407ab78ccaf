package dataplane

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// BenchmarkHitPath is the client handler's cost for a 4 KiB hit from the
// memory tier, without the network: what every hit pays on top of the
// server's own work, with the answer's header built in a header map
// (header map) or serialised straight into a whole answer (whole). Run
// with -benchmem for the allocations per hit.
func BenchmarkHitPath(b *testing.B) {
	body := strings.Repeat("x", 4096)
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=3600")
		w.Header().Set("Content-Type", "application/octet-stream") // as the bench origin's: stored as sent
		w.Header().Set("Last-Modified", "Mon, 30 Nov 2026 12:00:00 GMT")
		w.Header().Set("Etag", `"v1"`)
		w.Write([]byte(body))
	}))
	defer origin.Close()
	_, n := startOne(b, origin.URL, func(c *Config) { c.AccessLog = nil })
	req := func() *http.Request {
		r := httptest.NewRequest("GET", "http://www.example.com/obj/1", nil)
		r.RemoteAddr = "192.0.2.1:1234"
		r.Header.Set("User-Agent", "wrk")
		r.Header.Set("Accept", "*/*")
		return r
	}
	for range 2 { // the miss, then a hit once stored
		n.front.ServeClient(httptest.NewRecorder(), req())
	}
	w := httptest.NewRecorder()
	n.front.ServeClient(w, req())
	if w.Header().Get("X-Cache") != "HIT" || w.Body.Len() != 4096 {
		b.Fatalf("warm-up: %s, %d bytes", w.Header().Get("X-Cache"), w.Body.Len())
	}
	b.Run("header map", func(b *testing.B) { // as on the peer port
		b.ReportAllocs()
		for b.Loop() {
			w := &discardWriter{h: http.Header{}}
			n.front.ServeClient(w, req())
			if w.n != 4096 {
				b.Fatalf("%d bytes", w.n)
			}
		}
	})
	b.Run("whole", func(b *testing.B) { // as on the client port (h1 takes whole answers)
		b.ReportAllocs()
		for b.Loop() {
			w := &wholeWriter{discardWriter{h: http.Header{}}}
			n.front.ServeClient(w, req())
			if w.n != 4096 {
				b.Fatalf("%d bytes", w.n)
			}
		}
	})
}

// wholeWriter is a discardWriter that takes whole answers, as the client
// port's server does.
type wholeWriter struct{ discardWriter }

func (w *wholeWriter) Answer(status int, head, body []byte) bool {
	w.code, w.n = status, len(body)
	return true
}

// discardWriter is a ResponseWriter that keeps nothing but a count.
type discardWriter struct {
	h    http.Header
	n    int
	code int
}

func (w *discardWriter) Header() http.Header { return w.h }
func (w *discardWriter) WriteHeader(c int)   { w.code = c }
func (w *discardWriter) Write(b []byte) (int, error) {
	w.n += len(b)
	return len(b), nil
}
