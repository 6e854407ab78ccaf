package origin

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/shardcache/shardcache/dataplane/httpcache"
	"github.com/shardcache/shardcache/sdk/policy"
)

// countingOrigin is an httptest origin that counts the connections made
// to it.
func countingOrigin(t *testing.T, h http.Handler) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	var conns atomic.Int64
	srv := httptest.NewUnstartedServer(h)
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	return srv, &conns
}

func fill(t *testing.T, c *Client, path string) (*http.Response, error) {
	t.Helper()
	r := httptest.NewRequest(http.MethodGet, "http://shop.example"+path, nil)
	return c.Fetch(context.Background(), r, &policy.Policy{}, true, nil)
}

// fillBody fills path and returns the answer's body, read whole.
func fillBody(t *testing.T, c *Client, path string) string {
	t.Helper()
	resp, err := fill(t, c, path)
	if err != nil {
		t.Fatalf("fill %s: %v", path, err)
	}
	return readAll(t, resp)
}

func readAll(t *testing.T, resp *http.Response) string {
	t.Helper()
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// Fills one after another ride one keep-alive connection, and each gets
// its own answer whole.
func TestFillsShareAKeepAliveConnection(t *testing.T) {
	srv, conns := countingOrigin(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Via") == "" {
			http.Error(w, "no Via", http.StatusBadRequest)
			return
		}
		io.WriteString(w, strings.Repeat(r.URL.Path, 1000))
	}))
	c := New(Config{Default: mustURL(t, srv.URL), Via: "node-1"})
	defer c.CloseIdle()
	for i := range 20 {
		path := "/k" + string(rune('a'+i))
		resp, err := fill(t, c, path)
		if err != nil {
			t.Fatal(err)
		}
		if got := readAll(t, resp); resp.StatusCode != 200 || got != strings.Repeat(path, 1000) {
			t.Fatalf("fill %d: %d, %d bytes", i, resp.StatusCode, len(got))
		}
	}
	if n := conns.Load(); n != 1 {
		t.Fatalf("%d connections for 20 fills one after another, want 1", n)
	}
}

// rawOrigin accepts connections and gives each to serve.
func rawOrigin(t testing.TB, serve func(net.Conn)) (addr string, conns *atomic.Int64) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	conns = new(atomic.Int64)
	var wg sync.WaitGroup
	t.Cleanup(func() {
		l.Close()
		wg.Wait()
	})
	wg.Go(func() {
		for {
			nc, err := l.Accept()
			if err != nil {
				return
			}
			conns.Add(1)
			wg.Go(func() {
				defer nc.Close()
				serve(nc)
			})
		}
	})
	return l.Addr().String(), conns
}

// keepAliveOrigin is a rawOrigin that gives answer each request read on a
// connection, in turn.
func keepAliveOrigin(t testing.TB, answer func(nc net.Conn, req *http.Request)) (addr string, conns *atomic.Int64) {
	return rawOrigin(t, func(nc net.Conn) {
		br := bufio.NewReader(nc)
		for {
			req, err := http.ReadRequest(br)
			if err != nil {
				return
			}
			answer(nc, req)
		}
	})
}

// An origin that closed an idle connection (a restart, its own idle
// timeout) without saying so costs no failed fill: the request goes
// again on a new connection.
func TestAConnectionTheOriginClosedWhileIdleIsNotAFailure(t *testing.T) {
	addr, conns := rawOrigin(t, func(nc net.Conn) {
		br := bufio.NewReader(nc)
		if _, err := http.ReadRequest(br); err != nil {
			return
		}
		// Keep-alive as far as the client can tell, then closed.
		io.WriteString(nc, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
	})
	c := New(Config{Default: mustURL(t, "http://"+addr)})
	defer c.CloseIdle()
	for i := range 3 {
		if got := fillBody(t, c, "/x"); got != "ok" {
			t.Fatalf("fill %d: %q", i, got)
		}
	}
	if n := conns.Load(); n != 3 {
		t.Fatalf("%d connections, want 3 (one a fill)", n)
	}
}

// An origin that sends more than its answer's framing says (a body to a
// HEAD, bytes past the Content-Length) is not trusted with another fill:
// what it sent too much would be read as the next answer.
func TestBytesPastAnAnswerRetireItsConnection(t *testing.T) {
	addr, conns := keepAliveOrigin(t, func(nc net.Conn, req *http.Request) {
		switch {
		case req.Method == http.MethodHead:
			io.WriteString(nc, "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello")
		case req.URL.Path == "/extra":
			io.WriteString(nc, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nokHTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nforged")
		default:
			io.WriteString(nc, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
		}
	})
	c := New(Config{Default: mustURL(t, "http://"+addr)})
	defer c.CloseIdle()
	head := httptest.NewRequest(http.MethodHead, "http://shop.example/h", nil)
	resp, err := c.Fetch(context.Background(), head, policy.Default, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	for _, path := range []string{"/a", "/extra", "/b"} {
		if got := fillBody(t, c, path); got != "ok" {
			t.Fatalf("fill %s after an answer with bytes past it: %q, want ok", path, got)
		}
	}
	// The HEAD's and /extra's connections were retired; /a's carried /extra.
	if n := conns.Load(); n != 3 {
		t.Fatalf("%d connections, want 3", n)
	}
}

// Bytes an origin sends after an answer, once its connection is idle, are
// nobody's answer: the connection is not used again, and no fill reads
// them as its own.
func TestBytesAfterAnAnswerNeverAnswerTheNextFill(t *testing.T) {
	strayed, done := make(chan struct{}), make(chan struct{})
	addr, conns := keepAliveOrigin(t, func(nc net.Conn, req *http.Request) {
		io.WriteString(nc, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
		if req.URL.Path != "/then-stray" {
			return
		}
		// Once the test has read the answer whole (its connection is
		// idle in the pool), an answer nobody asked for.
		select {
		case <-strayed:
		case <-done:
			return
		}
		io.WriteString(nc, "HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nforged")
		select {
		case strayed <- struct{}{}:
		case <-done:
		}
	})
	t.Cleanup(func() { close(done) }) // before the origin's own cleanup waits for it
	c := New(Config{Default: mustURL(t, "http://"+addr)})
	defer c.CloseIdle()
	if got := fillBody(t, c, "/then-stray"); got != "ok" {
		t.Fatalf("%q", got)
	}
	strayed <- struct{}{} // the connection is idle: now the stray answer
	<-strayed
	if got := fillBody(t, c, "/b"); got != "ok" {
		t.Fatalf("the fill after a stray answer got %q, want its own ok", got)
	}
	if n := conns.Load(); n != 2 {
		t.Fatalf("%d connections, want 2", n)
	}
}

// An answer's head over 64 KiB is refused, as net/http's transport
// refuses it: a node holds no more of it than the bound.
func TestAHeadOverTheBoundIsRefused(t *testing.T) {
	addr, _ := rawOrigin(t, func(nc net.Conn) {
		if _, err := http.ReadRequest(bufio.NewReader(nc)); err != nil {
			return
		}
		bw := bufio.NewWriter(nc)
		bw.WriteString("HTTP/1.1 200 OK\r\n")
		for range 2000 {
			bw.WriteString("X-Filler: " + strings.Repeat("f", 40) + "\r\n") // 100 KiB in all
		}
		bw.WriteString("Content-Length: 0\r\n\r\n")
		bw.Flush()
	})
	c := New(Config{Default: mustURL(t, "http://"+addr)})
	defer c.CloseIdle()
	_, err := fill(t, c, "/big-head")
	if !errors.Is(err, errHeadTooLarge) {
		t.Fatalf("a 100 KiB head: %v, want %v", err, errHeadTooLarge)
	}
}

// An origin that takes the connection and never answers is given up on
// after the header timeout, and the failure is a timeout (Proxy-Status
// http_response_timeout), not a disconnection.
func TestAnOriginThatNeverAnswersTimesOut(t *testing.T) {
	release := make(chan struct{})
	addr, _ := rawOrigin(t, func(nc net.Conn) {
		http.ReadRequest(bufio.NewReader(nc))
		<-release
	})
	defer close(release)
	c := New(Config{Default: mustURL(t, "http://"+addr), HeaderTimeout: 50 * time.Millisecond})
	defer c.CloseIdle()
	_, err := fill(t, c, "/silent")
	if err == nil {
		t.Fatal("a silent origin answered")
	}
	if typ := httpcache.ErrorType(err); typ != "http_response_timeout" || httpcache.Disconnected(err) {
		t.Fatalf("%v: type %s, want http_response_timeout", err, typ)
	}
}

// An origin that closes the connection without answering disconnects
// the node (RFC 9111 4.2.4): the error says so.
func TestAnOriginThatClosesWithoutAnsweringIsADisconnection(t *testing.T) {
	addr, _ := rawOrigin(t, func(nc net.Conn) {
		http.ReadRequest(bufio.NewReader(nc))
	})
	c := New(Config{Default: mustURL(t, "http://"+addr)})
	defer c.CloseIdle()
	_, err := fill(t, c, "/closed")
	if !httpcache.Disconnected(err) {
		t.Fatalf("%v: type %s, want connection_terminated", err, httpcache.ErrorType(err))
	}
}

// A body closed before its end takes its connection with it (the rest
// would be read as the next answer), unless the rest was already read
// into the buffer.
func TestABodyClosedEarlyIsNotReadAsTheNextAnswer(t *testing.T) {
	srv, conns := countingOrigin(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := 10
		if r.URL.Path == "/big" {
			n = 1 << 20
		}
		io.WriteString(w, strings.Repeat("b", n))
	}))
	c := New(Config{Default: mustURL(t, srv.URL)})
	defer c.CloseIdle()
	for _, path := range []string{"/big", "/small", "/small"} {
		resp, err := fill(t, c, path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Read(make([]byte, 1))
		resp.Body.Close()
	}
	// /big's connection closed; /small's rest was buffered, so the second
	// /small reused its connection.
	if n := conns.Load(); n != 2 {
		t.Fatalf("%d connections, want 2", n)
	}
	if got := fillBody(t, c, "/small"); got != strings.Repeat("b", 10) {
		t.Fatalf("after early closes: %q", got)
	}
}

// At most maxIdle connections per origin are kept idle; those idle for
// longer than idleFor are closed by the reaper.
func TestIdleConnectionsAreBounded(t *testing.T) {
	const busy = 5
	var arrived sync.WaitGroup
	arrived.Add(busy)
	go1 := make(chan struct{})
	srv, _ := countingOrigin(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived.Done()
		<-go1
		io.WriteString(w, "x")
	}))
	tr := newH1Transport(Transport(0, 2))
	var clock atomic.Int64
	tr.now = func() time.Time { return time.Unix(clock.Load(), 0) }
	c := &http.Client{Transport: tr}
	var wg sync.WaitGroup
	for range busy {
		wg.Go(func() {
			resp, err := c.Get(srv.URL)
			if err != nil {
				t.Error(err)
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		})
	}
	arrived.Wait()
	close(go1)
	wg.Wait()
	addr := strings.TrimPrefix(srv.URL, "http://")
	tr.mu.Lock()
	idle := len(tr.idle[addr])
	tr.mu.Unlock()
	if idle != 2 {
		t.Fatalf("%d idle connections after %d at once, want the bound, 2", idle, busy)
	}
	clock.Add(int64(tr.idleFor/time.Second) + 1)
	tr.reap()
	tr.mu.Lock()
	left := len(tr.idle)
	tr.mu.Unlock()
	if left != 0 {
		t.Fatalf("%d origins with idle connections after the reap, want 0", left)
	}
}

// Requests the keep-alive class does not take (a body, https) go through
// net/http's transport: a POST's body reaches the origin.
func TestARequestWithABodyTakesTheStandardTransport(t *testing.T) {
	srv, _ := countingOrigin(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(w, r.Body)
	}))
	c := New(Config{Default: mustURL(t, srv.URL)})
	defer c.CloseIdle()
	r := httptest.NewRequest(http.MethodPost, "http://shop.example/echo", strings.NewReader("posted"))
	resp, err := c.Fetch(context.Background(), r, &policy.Policy{}, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := readAll(t, resp); got != "posted" {
		t.Fatalf("%q", got)
	}
}

// processCPU is the process's user and system time so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkFill fetches a 16 KiB object from a local origin, through the
// keep-alive class and through net/http's transport, in the same run:
// `go test -run '^$' -bench BenchmarkFill -benchmem ./dataplane/origin/`.
// The origin is a canned answer written whole for each request head read,
// so that cpu-ns/op is mostly the client's.
func BenchmarkFill(b *testing.B) {
	answer := []byte("HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\nContent-Length: 16384\r\n\r\n" + strings.Repeat("o", 16<<10))
	addr, _ := rawOrigin(b, func(nc net.Conn) {
		br := bufio.NewReader(nc)
		for {
			// A request head ends with an empty line; a fill has no body.
			for {
				line, err := br.ReadSlice('\n')
				if err != nil {
					return
				}
				if len(line) <= 2 {
					break
				}
			}
			if _, err := nc.Write(answer); err != nil {
				return
			}
		}
	})
	for _, tt := range []struct {
		name string
		rt   func(c *Client) http.RoundTripper
	}{
		{"keepalive", func(c *Client) http.RoundTripper { return c.http.Transport }},
		{"net-http", func(c *Client) http.RoundTripper { return c.http.Transport.(*h1Transport).next }},
	} {
		b.Run(tt.name, func(b *testing.B) {
			c := New(Config{Default: mustURL(b, "http://"+addr), Via: "node-1"})
			c.http.Transport = tt.rt(c)
			defer c.CloseIdle()
			r := httptest.NewRequest(http.MethodGet, "http://shop.example/obj", nil)
			buf := make([]byte, 32<<10)
			b.ReportAllocs()
			cpu0 := processCPU()
			for b.Loop() {
				resp, err := c.Fetch(context.Background(), r, policy.Default, true, nil)
				if err != nil {
					b.Fatal(err)
				}
				n := 0
				for {
					m, err := resp.Body.Read(buf)
					n += m
					if err != nil {
						break
					}
				}
				resp.Body.Close()
				if n != 16<<10 {
					b.Fatalf("%d bytes", n)
				}
			}
			// The origin's CPU is in it too, the same in both.
			b.ReportMetric(float64(processCPU()-cpu0)/float64(b.N), "cpu-ns/op")
		})
	}
}

// A status under 100 is no interim answer: taken for one, its body would
// be read as the answer. The fill fails instead (net/http would return it
// as a final answer of that status, body and all).
func TestAStatusUnder100IsNoInterimAnswer(t *testing.T) {
	forged := "HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nforged"
	addr, _ := keepAliveOrigin(t, func(nc net.Conn, req *http.Request) {
		io.WriteString(nc, "HTTP/1.1 099 Odd\r\nContent-Length: "+strconv.Itoa(len(forged))+"\r\n\r\n"+forged)
	})
	c := New(Config{Default: mustURL(t, "http://"+addr)})
	defer c.CloseIdle()
	resp, err := fill(t, c, "/x")
	if err == nil {
		t.Fatalf("a 099 answer: status %d, body %q; want the fill to fail", resp.StatusCode, readAll(t, resp))
	}
	if !strings.Contains(err.Error(), "status 099") {
		t.Fatalf("a 099 answer: %v; want an error naming the status", err)
	}
}
