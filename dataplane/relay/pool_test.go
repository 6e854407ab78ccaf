package relay

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"net/textproto"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/shardcache/shardcache/dataplane/hop"
	"github.com/shardcache/shardcache/dataplane/internal/h1client"
)

// At the bound (MaxConnsPerPeer keep-alive connections, all busy) a
// request is not queued: it rides the HTTP/2 connection. The keep-alive
// connections never exceed the bound, and are reused once free.
func TestPastTheBoundARequestRidesHTTP2(t *testing.T) {
	held, release := make(chan struct{}, 2), make(chan struct{})
	var protos [3]atomic.Int64 // by ProtoMajor
	addr := h2cServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		protos[r.ProtoMajor].Add(1)
		if r.URL.Path == "/hold" {
			w.WriteHeader(200)
			w.(http.Flusher).Flush()
			held <- struct{}{}
			<-release
		}
		io.WriteString(w, "ok")
	}))
	c := New(Config{MaxConnsPerPeer: 2})
	defer c.Close()
	var bodies []io.ReadCloser
	for range 2 {
		resp, err := c.Forward(context.Background(), addr, httptest.NewRequest("GET", "/hold", nil), http.Header{hop.Marker: {"a"}})
		if err != nil {
			t.Fatal(err)
		}
		<-held
		bodies = append(bodies, resp.Body)
	}
	if open, idle := c.pools.open(addr); open != 2 || idle != 0 {
		t.Fatalf("two answers being read: %d keep-alive connections open, %d idle; want 2 and 0", open, idle)
	}
	for range 3 {
		if b, err := relayOnce(c, addr, "/free"); err != nil || b != "ok" {
			t.Fatalf("at the bound: %q, %v", b, err)
		}
	}
	if protos[1].Load() != 2 || protos[2].Load() != 3 {
		t.Fatalf("at the bound: %d requests over HTTP/1.1, %d over HTTP/2; want 2 and 3", protos[1].Load(), protos[2].Load())
	}
	if open, _ := c.pools.open(addr); open != 2 {
		t.Fatalf("%d keep-alive connections open past the bound of 2", open)
	}
	close(release)
	for _, b := range bodies {
		if got, err := io.ReadAll(b); err != nil || string(got) != "ok" {
			t.Fatalf("held answer: %q, %v", got, err)
		}
		b.Close()
	}
	if open, idle := c.pools.open(addr); open != 2 || idle != 2 {
		t.Fatalf("answers read: %d keep-alive connections open, %d idle; want 2 and 2", open, idle)
	}
	if b, err := relayOnce(c, addr, "/free"); err != nil || b != "ok" || protos[1].Load() != 3 {
		t.Fatalf("once free: %q, %v, %d over HTTP/1.1; want the keep-alive class again", b, err, protos[1].Load())
	}
}

// oneShotPeer answers one request on each connection it accepts, as if
// keep-alive, and then closes the connection: what a peer that closed an
// idle connection looks like to the next exchange on it.
func oneShotPeer(t *testing.T) (addr string, accepted *atomic.Int64) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	accepted = new(atomic.Int64)
	go func() {
		for {
			nc, err := l.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			go func() {
				defer nc.Close()
				if _, err := http.ReadRequest(bufio.NewReader(nc)); err == nil {
					io.WriteString(nc, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
				}
			}()
		}
	}()
	return l.Addr().String(), accepted
}

// A reused connection the peer has closed is found out by the exchange
// on it: the request, which the peer never answered, is sent again on a
// new connection, and the peer's record stays clean.
func TestAConnectionThePeerClosedIsRetriedOnANewOne(t *testing.T) {
	addr, accepted := oneShotPeer(t)
	c := New(Config{})
	defer c.Close()
	for i := range 3 {
		if b, err := relayOnce(c, addr, "/x"); err != nil || b != "ok" {
			t.Fatalf("relay %d: %q, %v", i, b, err)
		}
	}
	if n := accepted.Load(); n != 3 {
		t.Fatalf("%d connections for 3 relays, want 3", n)
	}
	if f := c.breaker(addr).failures.Load(); f != 0 {
		t.Fatalf("%d failures counted against the peer, want 0", f)
	}
}

// A new connection that the peer closes unanswered is a failure of the
// peer, not sent again.
func TestANewConnectionClosedUnansweredIsAFailure(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var accepted atomic.Int64
	go func() {
		for {
			nc, err := l.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			nc.Close()
		}
	}()
	c := New(Config{})
	defer c.Close()
	if _, err := relayOnce(c, l.Addr().String(), "/x"); err == nil {
		t.Fatal("a peer that closed the connection unanswered: no error")
	}
	if n, f := accepted.Load(), c.breaker(l.Addr().String()).failures.Load(); n != 1 || f != 1 {
		t.Fatalf("%d connections, %d failures counted; want 1 and 1", n, f)
	}
}

// silentPeer accepts connections (as a paused process's kernel does) and
// reads what comes, answering nothing.
func silentPeer(t *testing.T) string {
	return rawPeer(t, func(nc net.Conn) { io.Copy(io.Discard, nc) })
}

// rawPeer is a listener that gives each connection it accepts to serve,
// in a goroutine of its own, and closes them all at the test's end.
func rawPeer(t *testing.T, serve func(nc net.Conn)) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			nc, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, nc)
			mu.Unlock()
			go serve(nc)
		}
	}()
	t.Cleanup(func() {
		l.Close()
		<-done
		mu.Lock()
		defer mu.Unlock()
		for _, nc := range conns {
			nc.Close()
		}
	})
	return l.Addr().String()
}

// A peer that stops answering (paused, cut off) is found out by the
// health probe, not by the relay's own deadline: the exchange waiting on
// it fails long before its context ends.
func TestAPeerThatAnswersNothingIsProbedAndCutOff(t *testing.T) {
	addr := silentPeer(t)
	c := New(Config{PingTimeout: 50e6})
	c.pools.probeAfter = 20e6
	defer c.Close()
	ctx, cancel := context.WithCancel(context.Background()) // never ends by itself
	defer cancel()
	_, err := c.Forward(ctx, addr, httptest.NewRequest("GET", "/x", nil), http.Header{hop.Marker: {"a"}})
	if err == nil || ctx.Err() != nil {
		t.Fatalf("relay to a silent peer: %v (context: %v); want a failure the probe caused", err, ctx.Err())
	}
	if n := c.probeFailed.Load(); n != 1 {
		t.Fatalf("%d failed probes, want 1", n)
	}
	if f := c.breaker(addr).failures.Load(); f != 1 {
		t.Fatalf("%d failures counted against the peer, want 1", f)
	}
}

// The same on a reused connection: the exchange the probe cut off is not
// sent again on a new connection, which would only wait for a second
// probe (a reused connection's exchange that got nothing back is sent
// again once, as one the peer closed while idle would be).
func TestAnExchangeTheProbeCutOffIsNotSentAgain(t *testing.T) {
	var silent atomic.Bool
	addr := rawPeer(t, func(nc net.Conn) {
		br := bufio.NewReader(nc)
		for {
			if _, err := http.ReadRequest(br); err != nil {
				return
			}
			if silent.Load() { // reads on, answers nothing
				io.Copy(io.Discard, br)
				return
			}
			io.WriteString(nc, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
		}
	})
	c := New(Config{PingTimeout: 50e6})
	c.pools.probeAfter = 20e6
	defer c.Close()
	if b, err := relayOnce(c, addr, "/x"); err != nil || b != "ok" {
		t.Fatalf("the first exchange: %q, %v", b, err)
	}
	silent.Store(true)
	ctx, cancel := context.WithCancel(context.Background()) // never ends by itself
	defer cancel()
	_, err := c.Forward(ctx, addr, httptest.NewRequest("GET", "/y", nil), http.Header{hop.Marker: {"a"}})
	if err == nil || ctx.Err() != nil {
		t.Fatalf("relay on a reused connection to a peer gone silent: %v (context: %v); want a failure the probe caused", err, ctx.Err())
	}
	if n := c.probeFailed.Load(); n != 1 {
		t.Fatalf("%d failed probes, want 1: the exchange was sent again after the probe cut it off", n)
	}
}

// A peer that answers the probe is alive: its slow answer (the origin's
// pace) is waited for.
func TestASlowAnswerOfALivePeerIsWaitedFor(t *testing.T) {
	probed := make(chan struct{})
	addr := h2cServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get(hop.HotKeysField) != "" {
			close(probed)
			io.WriteString(w, "[]")
			return
		}
		<-probed
		io.WriteString(w, "slow")
	}))
	c := New(Config{PingTimeout: 10e9})
	c.pools.probeAfter = 20e6
	if b, err := relayOnce(c, addr, "/slow"); err != nil || b != "slow" {
		t.Fatalf("a slow answer: %q, %v", b, err)
	}
	c.Close() // waits for the probe
	if n := c.probeFailed.Load(); n != 0 {
		t.Fatalf("%d failed probes of a live peer, want 0", n)
	}
}

// A peer listener of a version that serves HTTP/2 alone refuses HTTP/1.1
// with 505 (during a rolling upgrade): the request goes over HTTP/2, and
// so do the next ones, until the peer joins a ring again.
func TestAPeerServingHTTP2AloneIsRelayedToOverHTTP2(t *testing.T) {
	var protos [3]atomic.Int64
	addr := h2cServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		protos[r.ProtoMajor].Add(1)
		if r.ProtoMajor != 2 {
			w.Header().Set("Connection", "close")
			w.Header().Set(hop.RefusedField, "http1")
			http.Error(w, "peer listener: HTTP/2 only", http.StatusHTTPVersionNotSupported)
			return
		}
		io.WriteString(w, "ok")
	}))
	c := New(Config{})
	defer c.Close()
	for range 3 {
		if b, err := relayOnce(c, addr, "/x"); err != nil || b != "ok" {
			t.Fatalf("%q, %v", b, err)
		}
	}
	if protos[1].Load() != 1 || protos[2].Load() != 3 {
		t.Fatalf("%d requests over HTTP/1.1, %d over HTTP/2; want 1 and 3", protos[1].Load(), protos[2].Load())
	}
	c.Ring([]string{addr}, []string{addr}) // upgraded, back in the ring
	relayOnce(c, addr, "/x")
	if protos[1].Load() != 2 {
		t.Fatalf("after the peer joined anew: %d requests over HTTP/1.1, want 2", protos[1].Load())
	}
}

// An answer closed before its end keeps its connection when the rest of
// it has already arrived, else closes it. An answer without a body
// (HEAD) leaves the connection in the pool at once.
func TestAnAnswerClosedEarly(t *testing.T) {
	big := strings.Repeat("x", 1<<20)
	addr := h2cServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/big" {
			io.WriteString(w, big)
			return
		}
		w.Header().Set("Content-Length", "5")
		io.WriteString(w, "small")
	}))
	c := New(Config{})
	defer c.Close()
	forward := func(method, path string) *http.Response {
		resp, err := c.Forward(context.Background(), addr, httptest.NewRequest(method, path, nil), http.Header{hop.Marker: {"a"}})
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	resp := forward("GET", "/small")
	resp.Body.Read(make([]byte, 1))
	resp.Body.Close()
	if open, idle := c.pools.open(addr); open != 1 || idle != 1 {
		t.Fatalf("a small answer closed early: %d connections open, %d idle; want 1 and 1", open, idle)
	}
	resp = forward("HEAD", "/small")
	if open, idle := c.pools.open(addr); resp.ContentLength != 5 || open != 1 || idle != 1 {
		t.Fatalf("a HEAD answer (length %d): %d connections open, %d idle; want 1 and 1", resp.ContentLength, open, idle)
	}
	resp = forward("GET", "/big")
	resp.Body.Read(make([]byte, 1))
	resp.Body.Close()
	if _, err := resp.Body.Read(make([]byte, 1)); !errors.Is(err, h1client.ErrBodyClosed) {
		t.Fatalf("a Read after Close: %v, want errBodyClosed", err)
	}
	if open, idle := c.pools.open(addr); open != 0 || idle != 0 {
		t.Fatalf("a large answer closed early: %d connections open, %d idle; want 0", open, idle)
	}
}

// Interim answers (103 Early Hints) reach the request's trace, as the
// front passes them on to its client.
func TestInterimAnswersReachTheTrace(t *testing.T) {
	addr := h2cServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Link", "</style.css>; rel=preload")
		w.WriteHeader(http.StatusEarlyHints)
		w.Header().Del("Link")
		io.WriteString(w, "ok")
	}))
	c := New(Config{})
	defer c.Close()
	var got []string
	ctx := httptrace.WithClientTrace(context.Background(), &httptrace.ClientTrace{Got1xxResponse: func(code int, h textproto.MIMEHeader) error {
		got = append(got, http.StatusText(code)+" "+h.Get("Link"))
		return nil
	}})
	resp, err := c.Forward(ctx, addr, httptest.NewRequest("GET", "/x", nil), http.Header{hop.Marker: {"a"}})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if len(got) != 1 || got[0] != "Early Hints </style.css>; rel=preload" || string(b) != "ok" {
		t.Fatalf("interim answers %q, body %q; want one 103 with its Link, then ok", got, b)
	}
}

// The context's end ends a Read of the answer's body waiting on the
// peer, and the connection with it.
func TestAnEndedContextEndsTheBodysRead(t *testing.T) {
	stop := make(chan struct{})
	defer close(stop)
	addr := h2cServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "10")
		io.WriteString(w, "part")
		w.(http.Flusher).Flush()
		<-stop
	}))
	c := New(Config{})
	defer c.Close()
	ctx, cancel := context.WithCancel(context.Background())
	resp, err := c.Forward(ctx, addr, httptest.NewRequest("GET", "/x", nil), http.Header{hop.Marker: {"a"}})
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if b := make([]byte, 4); func() bool { _, err := io.ReadFull(resp.Body, b); return err != nil }() {
		t.Fatal("the first part did not come")
	}
	cancel()
	if _, err := resp.Body.Read(make([]byte, 1)); !errors.Is(err, context.Canceled) {
		t.Fatalf("a Read after the context ended: %v, want context.Canceled", err)
	}
	if open, _ := c.pools.open(addr); open != 0 {
		t.Fatalf("%d connections open after the exchange was ended, want 0", open)
	}
}

// Over mutual TLS the keep-alive class verifies the peer's certificate
// against the member the address belongs to, and presents its own.
func TestKeepAliveOverMutualTLS(t *testing.T) {
	var seen atomic.Value
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen.Store(r.Proto + " " + Identity(r.TLS.PeerCertificates[0]))
		io.WriteString(w, "ok")
	})
	addr, cfg := tlsPair(t, h, Config{})
	c := New(cfg)
	defer c.Close()
	for range 2 {
		if b, err := relayOnce(c, addr, "/x"); err != nil || b != "ok" {
			t.Fatalf("%q, %v", b, err)
		}
	}
	if got := seen.Load(); got != "HTTP/1.1 relay" {
		t.Fatalf("the owner saw %q, want HTTP/1.1 from relay", got)
	}
	if open, idle := c.pools.open(addr); open != 1 || idle != 1 {
		t.Fatalf("%d connections open, %d idle; want 1 and 1", open, idle)
	}
	cfg.PeerID = func(string) (string, bool) { return "someone-else", true }
	impostor := New(cfg)
	defer impostor.Close()
	if _, err := relayOnce(impostor, addr, "/x"); err == nil {
		t.Fatal("a peer whose certificate names another member was relayed to")
	}
}
