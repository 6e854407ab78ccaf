package relay

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shardcache/shardcache/dataplane/hop"
)

// h2cServer is a peer listener: HTTP/1.1 and h2c, as nodes serve it.
func h2cServer(t *testing.T, h http.Handler) string {
	t.Helper()
	return peerListener(t, h, nil)
}

// relayOnce relays GET path to addr and reads the answer whole.
func relayOnce(c *Client, addr, path string) (string, error) {
	req := httptest.NewRequest("GET", path, nil)
	resp, err := c.Forward(context.Background(), addr, req, http.Header{hop.Marker: {"a"}})
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

// Ten thousand relays from 16 goroutines: the keep-alive class opens no
// more connections than there are relays in flight, each over HTTP/1.1;
// with the class off, every relay is a stream of one HTTP/2 connection.
func TestTenThousandRelaysOpenNoMoreConnectionsThanTheyKeepInFlight(t *testing.T) {
	for _, tc := range []struct {
		name      string
		max       int
		proto     int
		maxOpened int64
	}{{"keep-alive", 0, 1, 16}, {"HTTP/2 alone", -1, 2, 2}} {
		t.Run(tc.name, func(t *testing.T) {
			var wrong atomic.Int64
			addr := h2cServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.ProtoMajor != tc.proto {
					wrong.Add(1)
				}
				io.WriteString(w, "ok")
			}))
			var opened, reused atomic.Int64
			c := New(Config{MaxConnsPerPeer: tc.max, OnConn: func(r bool) {
				if r {
					reused.Add(1)
				} else {
					opened.Add(1)
				}
			}})
			defer c.Close()
			if _, err := relayOnce(c, addr, "/x"); err != nil {
				t.Fatal(err)
			}
			var wg sync.WaitGroup
			errs := make(chan error, 16)
			for w := range 16 {
				wg.Go(func() {
					for i := w; i < 9999; i += 16 {
						if b, err := relayOnce(c, addr, "/x"); err != nil || b != "ok" {
							errs <- fmt.Errorf("%q, %v", b, err)
							return
						}
					}
				})
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Fatal(err)
			}
			if wrong.Load() != 0 {
				t.Fatalf("%d relays came over another protocol than HTTP/%d", wrong.Load(), tc.proto)
			}
			if opened.Load() > tc.maxOpened || opened.Load()+reused.Load() != 10000 {
				t.Fatalf("10,000 relays opened %d connections (%d reuses), want at most %d", opened.Load(), reused.Load(), tc.maxOpened)
			}
		})
	}
}

func TestBreakerSkipsADeadPeerThenRetries(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := l.Addr().String()
	l.Close()
	var dials atomic.Int64
	c := New(Config{OnConn: func(bool) { dials.Add(1) }})
	now := time.Unix(1000, 0)
	c.now = func() time.Time { return now }
	forward := func() error {
		_, err := c.Forward(context.Background(), dead, httptest.NewRequest("GET", "/x", nil), http.Header{})
		return err
	}
	for i := range breakerFailures {
		if err := forward(); err == nil || errors.Is(err, ErrPeerDown) {
			t.Fatalf("attempt %d: %v, want a connection error", i+1, err)
		}
	}
	if err := forward(); !errors.Is(err, ErrPeerDown) {
		t.Fatalf("after %d failures: %v, want ErrPeerDown without trying", breakerFailures, err)
	}
	now = now.Add(breakerOpen + time.Second)
	if err := forward(); err == nil || errors.Is(err, ErrPeerDown) {
		t.Fatalf("after the open period: %v, want a real attempt", err)
	}

	// Marked down again; then the peer joins a new ring epoch (it came
	// back, with a session): it is tried at once.
	for range breakerFailures {
		forward()
	}
	if err := forward(); !errors.Is(err, ErrPeerDown) {
		t.Fatalf("after %d more failures: %v, want ErrPeerDown", breakerFailures, err)
	}
	c.Ring([]string{dead}, nil)
	if err := forward(); !errors.Is(err, ErrPeerDown) {
		t.Fatalf("in a new epoch it did not join: %v, want ErrPeerDown still", err)
	}
	c.Ring([]string{dead}, []string{dead})
	if err := forward(); err == nil || errors.Is(err, ErrPeerDown) {
		t.Fatalf("after the peer joined the ring: %v, want a real attempt", err)
	}
	// A peer that left the ring takes its breaker and its connections
	// with it.
	forward()
	live := h2cServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	if _, err := relayOnce(c, live, "/x"); err != nil {
		t.Fatal(err)
	}
	if open, idle := c.pools.open(live); open != 1 || idle != 1 {
		t.Fatalf("after a relay: %d connections open, %d idle; want 1 and 1", open, idle)
	}
	c.Ring([]string{"127.0.0.1:1"}, nil)
	n := 0
	c.breakers.Range(func(any, any) bool { n++; return true })
	if n != 0 {
		t.Fatalf("%d breakers kept for peers out of the ring, want 0", n)
	}
	if open, _ := c.pools.open(live); open != 0 {
		t.Fatalf("%d connections kept to a peer out of the ring, want 0", open)
	}
}

// A request the hop cannot carry (a header past the peer's limit, a field
// HTTP/2 does not take) is its sender's error: however many, the peer's
// breaker stays closed. A peer's refusal is ErrRefused, not a failure.
func TestTheRequestsOwnErrorsAreNoPeerFailures(t *testing.T) {
	var served atomic.Int64
	addr := h2cServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		served.Add(1)
		if r.Header.Get("X-Refuse") != "" {
			w.Header().Set(hop.RefusedField, "not_a_member")
			http.Error(w, "refused", http.StatusForbidden)
			return
		}
		io.WriteString(w, "ok")
	}))
	c := New(Config{})
	defer c.CloseIdle()
	huge := http.Header{hop.Marker: {"a"}}
	for i := range 40000 {
		huge.Set(fmt.Sprintf("X-F%d", i), "v")
	}
	bad := []http.Header{
		{hop.Marker: {"a"}, "Connection": {"x-private"}}, // connection-specific: HTTP/2 does not carry it
		{hop.Marker: {"a"}, "Transfer-Encoding": {"chunked"}},
		{hop.Marker: {"a"}, "X-Split": {"v\r\nX-Shardcache-Invalidate: 1"}}, // would frame a field of its own
		{hop.Marker: {"a"}, "Bad Name": {"v"}},
	}
	for range 2 * breakerFailures {
		req := httptest.NewRequest("GET", "/x", nil)
		if _, err := c.Forward(context.Background(), addr, req, huge); !errors.Is(err, ErrHeaderTooLarge) {
			t.Fatalf("a header past the limit: %v, want ErrHeaderTooLarge", err)
		}
		for _, h := range bad {
			if _, err := c.Forward(context.Background(), addr, req, h); !errors.Is(err, ErrHeaderInvalid) {
				t.Fatalf("a request the hop does not carry (%q): %v; want ErrHeaderInvalid", h, err)
			}
		}
		if _, err := c.Forward(context.Background(), addr, req, http.Header{hop.Marker: {"a"}, "X-Refuse": {"1"}}); !errors.Is(err, ErrRefused) {
			t.Fatalf("a refusal: %v, want ErrRefused", err)
		}
	}
	resp, err := c.Forward(context.Background(), addr, httptest.NewRequest("GET", "/x", nil), http.Header{hop.Marker: {"a"}})
	if err != nil {
		t.Fatalf("after the request's own errors the peer is skipped: %v", err)
	}
	resp.Body.Close()
	if n := served.Load(); n != 2*breakerFailures+1 {
		t.Fatalf("the peer served %d requests, want %d: only the refused ones and the last", n, 2*breakerFailures+1)
	}
}
