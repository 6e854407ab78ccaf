package e2e

import (
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// clientLoad is clients reading random paths until stopped, each request
// through the node pick chooses (nil: skip the turn).
type clientLoad struct {
	stop     chan struct{}
	wg       sync.WaitGroup
	sent     atomic.Int64
	failed   atomic.Int64
	firstErr atomic.Value
}

// startLoad starts workers clients. An answer that is not 200 with size
// bytes counts as failed; size 0 checks only that the request was answered.
func startLoad(workers int, seed uint64, paths []string, size int64, pick func(*rand.Rand) *node) *clientLoad {
	l := &clientLoad{stop: make(chan struct{})}
	for w := range workers {
		l.wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), seed))
			client := &http.Client{Timeout: 30 * time.Second}
			for {
				select {
				case <-l.stop:
					return
				default:
				}
				nd := pick(rng)
				if nd == nil {
					continue
				}
				resp, err := client.Get("http://" + nd.client + paths[rng.IntN(len(paths))])
				l.sent.Add(1)
				if err == nil {
					var n int64
					n, err = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if err == nil && size > 0 && (resp.StatusCode != 200 || n != size) {
						err = fmt.Errorf("%d with %d bytes", resp.StatusCode, n)
					}
				}
				if err != nil {
					l.failed.Add(1)
					l.firstErr.CompareAndSwap(nil, err)
				}
			}
		})
	}
	return l
}

// halt stops the clients and waits for them.
func (l *clientLoad) halt() {
	close(l.stop)
	l.wg.Wait()
}
