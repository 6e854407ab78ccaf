package origin

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"syscall"
	"time"

	"golang.org/x/net/http/httpguts"

	"github.com/shardcache/shardcache/dataplane/internal/h1client"
)

// The keep-alive class for plaintext origins. A fill, a GET or HEAD with
// no body to an http:// origin, goes over a pooled HTTP/1.1 connection
// that the fetching goroutine writes and reads itself (internal/h1client).
// net/http's transport gives each connection a reader and a writer
// goroutine and hands every request and answer between them and the
// caller over channels. BenchmarkFill (a 16 KiB answer from a canned
// local origin, both in one run): 36 µs of CPU and 33 allocations a fill
// here, 47 µs and 50 through net/http's transport. Everything else (https
// origins, HTTP/2, requests with a body) goes through net/http's
// transport, as do the rules both share: the request written by
// http.Request.Write, the answer read by http.ReadResponse, 256 idle
// connections an origin, closed after 90 s idle, a head of at most
// 64 KiB within the header timeout, a request sent again, once, when a
// reused connection turns out closed, and no idle connection used again
// that has bytes nobody asked for (quiet).

// maxResponseHead bounds an origin answer's head, as the transport's
// MaxResponseHeaderBytes does.
const maxResponseHead = 64 << 10

// Buffer sizes of an origin connection: the read buffer holds a small
// answer whole with its head, so that reading it is one system call.
const (
	h1ReadBuffer  = 16 << 10
	h1WriteBuffer = 4 << 10
)

// errHeadTooLarge is an answer whose head is over maxResponseHead.
var errHeadTooLarge = fmt.Errorf("origin response: header over %d KiB", maxResponseHead>>10)

// headerTimeoutError is an answer whose head did not come within the
// header timeout.
type headerTimeoutError struct{}

func (headerTimeoutError) Error() string {
	return "origin response: timeout awaiting the response header"
}
func (headerTimeoutError) Timeout() bool   { return true }
func (headerTimeoutError) Temporary() bool { return true }

// h1Transport sends fills to plaintext origins over its own keep-alive
// connections, and every other request through next.
type h1Transport struct {
	next          *http.Transport
	dial          func(ctx context.Context, network, addr string) (net.Conn, error)
	headerTimeout time.Duration // 0: none
	maxIdle       int           // idle connections kept per origin
	idleFor       time.Duration // an idle connection older than this is closed
	now           func() time.Time

	mu     sync.Mutex
	idle   map[string][]*h1Conn // by address, most recently used last
	reaper *time.Timer          // set while any connection is idle
}

func newH1Transport(next *http.Transport) *h1Transport {
	return &h1Transport{next: next, dial: next.DialContext, headerTimeout: next.ResponseHeaderTimeout,
		maxIdle: next.MaxIdleConnsPerHost, idleFor: next.IdleConnTimeout, now: time.Now, idle: map[string][]*h1Conn{}}
}

// h1Conn is one keep-alive connection to an origin.
type h1Conn struct {
	h1client.Conn
	t      *h1Transport
	addr   string
	head   *headMeter
	idleAt time.Time

	// For quiet: the socket, and the peek made once.
	rc      syscall.RawConn
	peekFn  func(fd uintptr) bool
	peekErr error
	peekBuf [1]byte

	// The header timeout: timer sets the connection's read deadline in
	// the past once due has passed while a head is awaited (due is zero
	// otherwise; a callback of an earlier wait that runs late finds its
	// due not yet come), and records that it did.
	timer    *time.Timer
	mu       sync.Mutex
	due      time.Time
	timedOut bool
}

// RoundTrip implements http.RoundTripper.
func (t *h1Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.URL.Scheme != "http" || req.Method != http.MethodGet && req.Method != http.MethodHead ||
		req.Body != nil && req.Body != http.NoBody || req.ContentLength > 0 {
		return t.next.RoundTrip(req)
	}
	for k, vs := range req.Header {
		if !httpguts.ValidHeaderFieldName(k) {
			return nil, fmt.Errorf("origin request: invalid header field name %q", k)
		}
		for _, v := range vs {
			if !httpguts.ValidHeaderFieldValue(v) {
				return nil, fmt.Errorf("origin request: invalid header field value for %q", k)
			}
		}
	}
	addr := req.URL.Host
	if req.URL.Port() == "" {
		addr = net.JoinHostPort(req.URL.Hostname(), "80")
	}
	ctx := req.Context()
	for attempt := 0; ; attempt++ {
		cn, err := t.get(ctx, addr, attempt > 0)
		if err != nil {
			return nil, err
		}
		resp, err := h1client.Do(ctx, &cn.Conn, req, cn)
		if err == nil {
			return resp, nil
		}
		cn.NC.Close()
		if cerr := ctx.Err(); cerr != nil {
			return nil, fmt.Errorf("%w (%w)", cerr, err)
		}
		if !errors.Is(err, h1client.ErrNothingBack) || !cn.Reused || attempt > 0 {
			return nil, err
		}
		// The origin closed a connection while it was idle: it may have
		// closed them all (a restart). The request goes again, once, on a
		// new connection.
		t.closeIdleTo(addr)
	}
}

// get returns an idle connection to addr (unless fresh), else a new one.
func (t *h1Transport) get(ctx context.Context, addr string, fresh bool) (*h1Conn, error) {
	if !fresh {
		t.mu.Lock()
		now := t.now()
		for l := t.idle[addr]; len(l) > 0; l = t.idle[addr] {
			cn := l[len(l)-1]
			l[len(l)-1] = nil
			t.setIdleLocked(addr, l[:len(l)-1])
			if now.Sub(cn.idleAt) > t.idleFor {
				cn.NC.Close()
				continue
			}
			t.mu.Unlock()
			if !cn.quiet() {
				cn.NC.Close()
				t.mu.Lock()
				continue
			}
			cn.Reused = true
			return cn, nil
		}
		t.mu.Unlock()
	}
	nc, err := t.dial(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	cn := &h1Conn{t: t, addr: addr, head: &headMeter{r: nc, left: -1}}
	cn.NC = nc
	cn.BR = bufio.NewReaderSize(cn.head, h1ReadBuffer)
	cn.BW = bufio.NewWriterSize(nc, h1WriteBuffer)
	cn.timer = time.AfterFunc(time.Hour, cn.headerTimedOut)
	cn.timer.Stop()
	if sc, ok := nc.(syscall.Conn); ok {
		if cn.rc, err = sc.SyscallConn(); err != nil {
			nc.Close()
			return nil, err
		}
		cn.peekFn = cn.peek
	}
	return cn, nil
}

// quiet reports whether an idle connection is still open with nothing to
// read: a byte waiting is an answer nobody asked for (an origin that sent
// more than its last answer's framing said, later than that answer),
// which would be read as the next fill's answer; an end of file is the
// origin's close. net/http's transport keeps a read pending on every idle
// connection to notice either; here one non-blocking peek (recv with
// MSG_PEEK) as the connection is taken does.
func (cn *h1Conn) quiet() bool {
	if cn.rc == nil {
		return true
	}
	if err := cn.rc.Read(cn.peekFn); err != nil {
		return false
	}
	return cn.peekErr == syscall.EAGAIN
}

// peek is quiet's non-blocking look at the socket.
func (cn *h1Conn) peek(fd uintptr) bool {
	_, _, cn.peekErr = syscall.Recvfrom(int(fd), cn.peekBuf[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
	return true
}

// setIdleLocked sets addr's idle connections, forgetting addr when none.
func (t *h1Transport) setIdleLocked(addr string, l []*h1Conn) {
	if len(l) == 0 {
		delete(t.idle, addr)
		return
	}
	t.idle[addr] = l
}

// put keeps a connection whose exchange ended cleanly, unless its origin
// has maxIdle idle already.
func (t *h1Transport) put(cn *h1Conn) {
	t.mu.Lock()
	l := t.idle[cn.addr]
	if len(l) >= t.maxIdle {
		t.mu.Unlock()
		cn.NC.Close()
		return
	}
	cn.idleAt = t.now()
	t.idle[cn.addr] = append(l, cn)
	if t.reaper == nil {
		t.reaper = time.AfterFunc(t.idleFor, t.reap)
	}
	t.mu.Unlock()
}

// reap closes the connections idle for longer than idleFor, so that an
// origin no longer asked holds no connection of the node's.
func (t *h1Transport) reap() {
	var stale []*h1Conn
	t.mu.Lock()
	now := t.now()
	for addr, l := range t.idle {
		i := 0
		for i < len(l) && now.Sub(l[i].idleAt) > t.idleFor {
			i++
		}
		stale = append(stale, l[:i]...)
		t.setIdleLocked(addr, l[i:])
	}
	switch {
	case len(t.idle) == 0:
		t.reaper = nil
	case t.reaper == nil:
		t.reaper = time.AfterFunc(t.idleFor, t.reap)
	default:
		t.reaper.Reset(t.idleFor)
	}
	t.mu.Unlock()
	for _, cn := range stale {
		cn.NC.Close()
	}
}

// closeIdleTo closes the idle connections to addr.
func (t *h1Transport) closeIdleTo(addr string) {
	t.mu.Lock()
	l := t.idle[addr]
	delete(t.idle, addr)
	t.mu.Unlock()
	for _, cn := range l {
		cn.NC.Close()
	}
}

// CloseIdleConnections closes every idle connection, its own and next's.
func (t *h1Transport) CloseIdleConnections() {
	t.mu.Lock()
	all := t.idle
	t.idle = map[string][]*h1Conn{}
	t.mu.Unlock()
	for _, l := range all {
		for _, cn := range l {
			cn.NC.Close()
		}
	}
	t.next.CloseIdleConnections()
}

// WriteRequest writes the request's head (it has no body).
func (cn *h1Conn) WriteRequest(bw *bufio.Writer, req *http.Request) error {
	if err := req.Write(bw); err != nil {
		return err
	}
	return bw.Flush()
}

// Awaiting bounds the answer's head: its size, and its wait by the
// header timeout.
func (cn *h1Conn) Awaiting() {
	cn.head.left = maxResponseHead
	if cn.t.headerTimeout > 0 {
		cn.mu.Lock()
		cn.due = time.Now().Add(cn.t.headerTimeout)
		cn.mu.Unlock()
		cn.timer.Reset(cn.t.headerTimeout)
	}
}

// Arrived is nothing to an origin connection: the header timeout bounds
// the whole head.
func (cn *h1Conn) Arrived() {}

// Awaited lifts the bounds of the head. The exchange fails if the header
// timeout fired, even once the head was read; a head that failed as the
// bound of its size was reached was too large.
func (cn *h1Conn) Awaited(err error) error {
	if err != nil && cn.head.left == 0 {
		err = errHeadTooLarge
	}
	cn.head.left = -1
	if cn.t.headerTimeout <= 0 {
		return err
	}
	cn.timer.Stop()
	cn.mu.Lock()
	timedOut := cn.timedOut
	cn.due = time.Time{}
	cn.mu.Unlock()
	if timedOut {
		return headerTimeoutError{}
	}
	return err
}

// headerTimedOut ends the wait for the answer's head.
func (cn *h1Conn) headerTimedOut() {
	cn.mu.Lock()
	defer cn.mu.Unlock()
	if !cn.due.IsZero() && !time.Now().Before(cn.due) {
		cn.timedOut = true
		cn.NC.SetReadDeadline(h1client.ALongTimeAgo)
	}
}

// End keeps the connection for another fill, or closes it.
func (cn *h1Conn) End(reuse bool) {
	if reuse {
		cn.t.put(cn)
		return
	}
	cn.NC.Close()
}

// headMeter is a connection's reader that, while left is not negative,
// lets no more than left bytes through: the bound of an answer's head.
type headMeter struct {
	r    io.Reader
	left int64
}

func (m *headMeter) Read(p []byte) (int, error) {
	if m.left == 0 {
		return 0, errHeadTooLarge
	}
	if m.left > 0 && int64(len(p)) > m.left {
		p = p[:m.left]
	}
	n, err := m.r.Read(p)
	if m.left > 0 {
		m.left -= int64(n)
	}
	return n, err
}
