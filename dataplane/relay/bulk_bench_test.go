package relay

import (
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/shardcache/shardcache/dataplane/hop"
)

// BenchmarkBulkBody relays one 64 MiB body over each hop (see hops), plain
// and over mutual TLS, from memory (written in 1 MiB writes) and from a
// file (copied as the owner copies a disk record: by sendfile where the
// connection is a plain TCP one): the hop's bulk throughput, as MB/s,
// and the CPU time (user+system) per body of both ends.
func BenchmarkBulkBody(b *testing.B) {
	const size = 64 << 20
	chunk := make([]byte, 1<<20)
	path := filepath.Join(b.TempDir(), "record")
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	for sent := 0; sent < size; sent += len(chunk) {
		f.Write(chunk)
	}
	f.Close()
	handlers := map[string]http.HandlerFunc{
		"memory": func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Length", strconv.Itoa(size))
			for sent := 0; sent < size; sent += len(chunk) {
				w.Write(chunk)
			}
		},
		"file": func(w http.ResponseWriter, r *http.Request) {
			f, err := os.Open(path)
			if err != nil {
				http.Error(w, err.Error(), 500)
				return
			}
			defer f.Close()
			w.Header().Set("Content-Length", strconv.Itoa(size))
			io.Copy(w, &io.LimitedReader{R: f, N: size})
		},
	}
	for _, source := range []string{"memory", "file"} {
		for _, tls := range []bool{false, true} {
			for _, hp := range hops {
				mode := "plain"
				if tls {
					mode = "tls"
				}
				b.Run(hp.name+"/"+mode+"/"+source, func(b *testing.B) {
					cfg := Config{MaxConnsPerPeer: hp.max}
					var addr string
					if tls {
						addr, cfg = tlsPair(b, handlers[source], cfg)
					} else {
						addr = peerListener(b, handlers[source], nil)
					}
					c := New(cfg)
					defer c.Close()
					bulkLoad(b, c, addr, size)
				})
			}
		}
	}
}

func bulkLoad(b *testing.B, c *Client, addr string, size int64) {
	b.SetBytes(size)
	// Read as the front passes a body on (net/http's copy to a client
	// connection): 32 KiB at a time.
	buf := make([]byte, 32<<10)
	cpu := cpuTime()
	for b.Loop() {
		req, _ := http.NewRequest("GET", "http://peer/bulk", nil)
		resp, err := c.Forward(context.Background(), addr, req, http.Header{hop.Marker: {"bench"}})
		if err != nil {
			b.Fatal(err)
		}
		n, err := io.CopyBuffer(struct{ io.Writer }{io.Discard}, resp.Body, buf)
		resp.Body.Close()
		if err != nil || n != size {
			b.Fatalf("%d bytes, %v", n, err)
		}
	}
	b.ReportMetric(float64((cpuTime()-cpu).Microseconds())/float64(b.N), "cpu-µs/op")
}
