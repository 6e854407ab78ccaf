// Package coalesce sends a small HTTP/1.1 answer, header and body, in one
// write system call.
//
// net/http buffers an HTTP/1.1 connection's output in 4 KiB: a 4 KiB body
// and its header leave in two writes, one when the buffer fills and one
// when the handler ends. On a cache hit that second write is a sizeable
// part of the answer's cost. A handler that knows its answer is small and
// complete asks the connection to hold what is written to it (Hold); the
// client handler's end (Settle) flushes net/http's buffers into the held
// bytes and writes them at once, as nginx does. What the handler records
// of the answer (metrics, the access log) is recorded before its last
// byte leaves, as it was when net/http wrote that byte after the handler.
//
// Only connections accepted through Listener and tagged by ConnContext can
// hold; Hold does nothing for every other request: HTTP/2, TLS, a request
// from another listener.
package coalesce

import (
	"context"
	"io"
	"net"
	"net/http"
	"sync"
)

// MaxHeld is the most a connection holds: the largest body Hold is asked
// for plus room for its header.
const MaxHeld = 64 << 10

// headerRoom is what Hold adds to the body's length for the header.
const headerRoom = 2 << 10

// Listener wraps every accepted connection in a Conn.
type Listener struct{ net.Listener }

// Accept returns the next connection, able to hold.
func (l Listener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &Conn{Conn: c}, nil
}

type ctxKey struct{}

// ConnContext is an http.Server's ConnContext: it makes a Conn reachable
// from its requests.
func ConnContext(ctx context.Context, c net.Conn) context.Context {
	if cc, ok := c.(*Conn); ok {
		return context.WithValue(ctx, ctxKey{}, cc)
	}
	return ctx
}

// Conn is a connection that can hold its writes for one answer.
type Conn struct {
	net.Conn
	mu      sync.Mutex
	holding bool
	held    *[]byte
	err     error // a held write that failed: returned by the next write
}

// Hold makes r's connection keep what is written to it until Settle, for
// an answer whose body is n bytes. It reports false, holding nothing, when
// r did not come on a Conn, is not HTTP/1.x, or n is too large.
func Hold(r *http.Request, n int64) bool {
	if r.ProtoMajor != 1 || n < 0 || n+headerRoom > MaxHeld {
		return false
	}
	c, _ := r.Context().Value(ctxKey{}).(*Conn)
	if c == nil {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.holding {
		return false
	}
	c.holding = true
	c.held = getBuf(int(n) + headerRoom)
	return true
}

// Settle ends r's answer on a connection that holds it: it flushes w
// (net/http's buffers, into the held bytes) and writes what is held in
// one call. It does nothing when r's connection holds nothing.
func Settle(w http.ResponseWriter, r *http.Request) {
	c, _ := r.Context().Value(ctxKey{}).(*Conn)
	if c == nil {
		return
	}
	c.mu.Lock()
	holding := c.holding
	c.mu.Unlock()
	if !holding {
		return
	}
	flush(w)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.writeHeld()
}

// writeHeld writes and returns the held bytes; c.mu is held.
func (c *Conn) writeHeld() {
	if !c.holding {
		return
	}
	c.holding = false
	b := c.held
	c.held = nil
	if len(*b) > 0 && c.err == nil {
		_, c.err = c.Conn.Write(*b)
	}
	putBuf(b)
}

// Write holds p while the connection holds (to the bound; past it, what
// was held is written first), else writes it.
func (c *Conn) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		return 0, c.err
	}
	if c.holding {
		if len(*c.held)+len(p) <= MaxHeld {
			*c.held = append(*c.held, p...)
			return len(p), nil
		}
		c.writeHeld() // more than Hold was told: hold no longer
		if c.err != nil {
			return 0, c.err
		}
	}
	return c.Conn.Write(p)
}

// ReadFrom writes what is held, then passes r to the connection's own
// ReadFrom, so that a body read from a file still goes out by sendfile.
func (c *Conn) ReadFrom(r io.Reader) (int64, error) {
	c.mu.Lock()
	c.writeHeld()
	err := c.err
	c.mu.Unlock()
	if err != nil {
		return 0, err
	}
	if rf, ok := c.Conn.(io.ReaderFrom); ok {
		return rf.ReadFrom(r)
	}
	return io.Copy(struct{ io.Writer }{c.Conn}, r)
}

// NetConn is the connection under c.
func (c *Conn) NetConn() net.Conn { return c.Conn }

// CloseWrite passes on to the connection's, which net/http uses to close
// a connection gracefully.
func (c *Conn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// flush flushes the first writer in w's Unwrap chain that can.
func flush(w http.ResponseWriter) {
	for {
		if f, ok := w.(http.Flusher); ok {
			f.Flush()
			return
		}
		u, ok := w.(interface{ Unwrap() http.ResponseWriter })
		if !ok {
			return
		}
		w = u.Unwrap()
	}
}

// Held buffers come from pools by size, the smallest that fits.
var pools = [...]struct {
	size int
	pool sync.Pool
}{{size: 8 << 10}, {size: 16 << 10}, {size: 32 << 10}, {size: MaxHeld}}

func getBuf(n int) *[]byte {
	for i := range pools {
		if p := &pools[i]; n <= p.size {
			if b, ok := p.pool.Get().(*[]byte); ok {
				return b
			}
			b := make([]byte, 0, p.size)
			return &b
		}
	}
	b := make([]byte, 0, n)
	return &b
}

func putBuf(b *[]byte) {
	*b = (*b)[:0]
	for i := range pools {
		if p := &pools[i]; cap(*b) == p.size {
			p.pool.Put(b)
			return
		}
	}
}
