package relay

import (
	"context"
	"io"
	"net"
	"net/http"
	"testing"

	"github.com/shardcache/shardcache/dataplane/hop"
)

// BenchmarkBulkBody relays one 64 MiB body over the peer hop (h2c on
// loopback): the hop's bulk throughput, reported as MB/s.
func BenchmarkBulkBody(b *testing.B) {
	const size = 64 << 20
	chunk := make([]byte, 1<<20)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	srv := &http.Server{Protocols: Protocols(true), HTTP2: PeerServerHTTP2(), Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for sent := 0; sent < size; sent += len(chunk) {
			w.Write(chunk)
		}
	})}
	go srv.Serve(l)
	defer srv.Close()
	c := New(Config{})
	defer c.CloseIdle()
	b.SetBytes(size)
	for b.Loop() {
		req, _ := http.NewRequest("GET", "http://peer/bulk", nil)
		resp, err := c.Forward(context.Background(), l.Addr().String(), req, http.Header{hop.Marker: {"bench"}})
		if err != nil {
			b.Fatal(err)
		}
		n, err := io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if err != nil || n != size {
			b.Fatalf("%d bytes, %v", n, err)
		}
	}
}
