// Package clientconn bounds and watches the client listener's connections,
// below the client port's HTTP server:
//
//   - A connection the client stops reading is closed once no byte of the
//     answer has been taken for WriteTimeout (nginx's send_timeout): the
//     deadline is renewed by every write that makes progress, so it bounds
//     waiting, never the length of a transfer.
//   - One client address holds at most MaxPerAddr connections; beyond, a
//     new one is answered 503 and closed.
//   - An answer that broke off can end the connection with a reset (Reset),
//     so that a client reading to the close, as an HTTP/1.0 client of an
//     answer without a length does, sees an error and not a whole body.
//
// It imports nothing of the data plane.
package clientconn

import (
	"context"
	"io"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Config bounds a Listener's connections. Zero values mean no bound.
type Config struct {
	// WriteTimeout is how long a write may wait for the client to take a
	// byte.
	WriteTimeout time.Duration
	// MaxPerAddr bounds the open connections of one client address.
	MaxPerAddr int
	// Exempt, when set, names addresses MaxPerAddr does not bound (the
	// trusted proxies, which carry many clients' connections).
	Exempt func(netip.Addr) bool
	// OnRefused, when set, is called for each connection refused at the
	// bound; OnStalled for each write cut by WriteTimeout.
	OnRefused, OnStalled func()
}

// Listener wraps every accepted connection in a Conn.
type Listener struct {
	net.Listener
	cfg  Config
	mu   sync.Mutex
	open map[netip.Addr]int // addresses with connections open, and how many
}

// NewListener bounds l's connections by cfg.
func NewListener(l net.Listener, cfg Config) *Listener {
	return &Listener{Listener: l, cfg: cfg, open: map[netip.Addr]int{}}
}

// refusal is what a connection past MaxPerAddr is told before it is closed.
const refusal = "HTTP/1.1 503 Service Unavailable\r\nConnection: close\r\nContent-Type: text/plain; charset=utf-8\r\n" +
	"Retry-After: 1\r\nContent-Length: 57\r\n\r\nshardcache: too many connections from this client address"

// Accept returns the next connection within the bounds.
func (l *Listener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		var addr netip.Addr
		if ap, err := netip.ParseAddrPort(c.RemoteAddr().String()); err == nil {
			addr = ap.Addr().Unmap()
		}
		if l.cfg.MaxPerAddr > 0 && (l.cfg.Exempt == nil || !l.cfg.Exempt(addr)) && !l.take(addr) {
			if l.cfg.OnRefused != nil {
				l.cfg.OnRefused()
			}
			c.SetWriteDeadline(time.Now().Add(time.Second))
			io.WriteString(c, refusal)
			c.Close()
			continue
		}
		return &Conn{Conn: c, l: l, addr: addr, counted: l.cfg.MaxPerAddr > 0}, nil
	}
}

// take counts a connection of addr; false at the bound.
func (l *Listener) take(addr netip.Addr) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.open[addr] >= l.cfg.MaxPerAddr {
		return false
	}
	l.open[addr]++
	return true
}

func (l *Listener) release(addr netip.Addr) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.open[addr]--; l.open[addr] <= 0 {
		delete(l.open, addr)
	}
}

// Open is the number of connections addr holds.
func (l *Listener) Open(addr netip.Addr) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.open[addr]
}

// Conn is one client connection.
type Conn struct {
	net.Conn
	l       *Listener
	addr    netip.Addr
	counted bool
	closed  atomic.Bool
	// renewed is when the write deadline was last pushed forward
	// (UnixNano); see renew.
	renewed atomic.Int64
}

// Close closes the connection once.
func (c *Conn) Close() error {
	if !c.closed.CompareAndSwap(false, true) {
		return nil
	}
	if c.counted {
		c.l.release(c.addr)
	}
	return c.Conn.Close()
}

// renew pushes the write deadline WriteTimeout past now, unless it was
// pushed less than an eighth of it (at most a second) ago: a write then
// costs a clock read, and the deadline stays within an eighth of its
// setting.
func (c *Conn) renew() {
	d := c.l.cfg.WriteTimeout
	if d <= 0 {
		return
	}
	now := time.Now()
	if n := now.UnixNano(); n-c.renewed.Load() >= int64(min(d/8, time.Second)) {
		c.renewed.Store(n)
		c.Conn.SetWriteDeadline(now.Add(d))
	}
}

// Write writes p, renewing the write deadline.
func (c *Conn) Write(p []byte) (int, error) {
	c.renew()
	n, err := c.Conn.Write(p)
	c.stalled(err)
	return n, err
}

// stalled counts a write the client took nothing of for WriteTimeout.
func (c *Conn) stalled(err error) {
	if ne, ok := err.(net.Error); ok && ne.Timeout() && c.l.cfg.OnStalled != nil {
		c.l.cfg.OnStalled()
	}
}

// sendChunk is how much of a file one sendfile call sends before the write
// deadline is renewed.
const sendChunk = 4 << 20

// ReadFrom sends r, a file by sendfile where net can, in chunks that each
// renew the write deadline.
func (c *Conn) ReadFrom(r io.Reader) (int64, error) {
	rf, ok := c.Conn.(io.ReaderFrom)
	lr, limited := r.(*io.LimitedReader)
	if ok && limited {
		_, file := lr.R.(syscall.Conn) // a descriptor: an *os.File, a stored body
		if _, conn := lr.R.(net.Conn); file && !conn {
			var total int64
			for lr.N > 0 {
				c.renewed.Store(0) // every chunk renews
				c.renew()
				n, err := rf.ReadFrom(&io.LimitedReader{R: lr.R, N: min(lr.N, sendChunk)})
				lr.N -= n
				total += n
				if err != nil || n == 0 {
					c.stalled(err)
					return total, err
				}
			}
			return total, nil
		}
	}
	buf := make([]byte, 32<<10)
	return io.CopyBuffer(writerOnly{c}, r, buf)
}

// writerOnly hides a Conn's ReadFrom from io.CopyBuffer.
type writerOnly struct{ io.Writer }

// NetConn returns the connection underneath, for whoever reaches
// through the wrappers to the TCP connection (the client port's server
// resetting a connection whose handler panicked).
func (c *Conn) NetConn() net.Conn { return c.Conn }

// CloseWrite passes on to the connection's.
func (c *Conn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// Reset makes the connection's close a reset (RST), so that the client
// sees the answer broke off. It does nothing on a connection that is not
// TCP.
func (c *Conn) Reset() {
	if tc, ok := c.Conn.(interface{ SetLinger(int) error }); ok {
		tc.SetLinger(0)
	}
}

type ctxKey struct{}

// ConnContext is an http.Server's ConnContext: it makes the Conn under c
// (through NetConn unwrapping) reachable from its requests.
func ConnContext(ctx context.Context, c net.Conn) context.Context {
	for c != nil {
		if cc, ok := c.(*Conn); ok {
			return context.WithValue(ctx, ctxKey{}, cc)
		}
		u, ok := c.(interface{ NetConn() net.Conn })
		if !ok {
			break
		}
		c = u.NetConn()
	}
	return ctx
}

// From returns the Conn a request came on, nil when it did not come
// through a Listener.
func From(ctx context.Context) *Conn {
	c, _ := ctx.Value(ctxKey{}).(*Conn)
	return c
}
