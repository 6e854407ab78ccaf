package relay

import (
	"context"
	"io"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/shardcache/shardcache/dataplane/hop"
)

// hops are the two ways of relaying compared: every request a stream of
// one HTTP/2 connection (the hop before the keep-alive class), and the
// keep-alive class with HTTP/2 past its bound.
var hops = []struct {
	name string
	max  int // Config.MaxConnsPerPeer
}{{"http2", -1}, {"keepalive", 0}}

// BenchmarkRelaySmall relays a 4 KiB answer under parallel load (32
// requests in flight, as S1's clients keep), over each hop, plain and
// over mutual TLS, both ends in this process. Besides ns/op (the inverse
// of the throughput) it reports the median and 99th percentile latency of
// one relayed request and the CPU time (user+system) per request. Compare
// ratios within one run: run with -count 3 or more and -benchmem.
func BenchmarkRelaySmall(b *testing.B) {
	answer := make([]byte, 4096)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", strconv.Itoa(len(answer)))
		w.Write(answer)
	})
	for _, tls := range []bool{false, true} {
		for _, hp := range hops {
			name := hp.name + "/plain"
			if tls {
				name = hp.name + "/tls"
			}
			b.Run(name, func(b *testing.B) {
				cfg := Config{MaxConnsPerPeer: hp.max}
				var addr string
				if tls {
					addr, cfg = tlsPair(b, h, cfg)
				} else {
					addr = peerListener(b, h, nil)
				}
				c := New(cfg)
				defer c.Close()
				relaySmallLoad(b, c, addr, len(answer))
			})
		}
	}
}

// relaySmallLoad runs the relays of BenchmarkRelaySmall and reports its
// figures.
func relaySmallLoad(b *testing.B, c *Client, addr string, size int) {
	do := func(buf []byte) {
		req, _ := http.NewRequest("GET", "http://peer/obj/1", nil)
		resp, err := c.Forward(context.Background(), addr, req, http.Header{hop.Marker: {"bench"}})
		if err != nil {
			b.Error(err)
			return
		}
		n, err := io.ReadFull(resp.Body, buf)
		if _, eof := resp.Body.Read(buf[:1]); eof != io.EOF || err != nil || n != size {
			b.Errorf("%d bytes, %v", n, err)
		}
		resp.Body.Close()
	}
	do(make([]byte, size))
	var mu sync.Mutex
	var lat []time.Duration
	b.SetParallelism(16) // 32 in flight on 2 cores
	b.ReportAllocs()
	cpu := cpuTime()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		buf := make([]byte, size)
		var mine []time.Duration
		for pb.Next() {
			start := time.Now()
			do(buf)
			mine = append(mine, time.Since(start))
		}
		mu.Lock()
		lat = append(lat, mine...)
		mu.Unlock()
	})
	b.StopTimer()
	used := cpuTime() - cpu
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
	b.ReportMetric(float64(used.Microseconds())/float64(b.N), "cpu-µs/op")
}

// cpuTime is the user and system time this process has used.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
