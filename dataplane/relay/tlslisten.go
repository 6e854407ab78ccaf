package relay

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/shardcache/shardcache/dataplane/internal/h1"
)

// The peer listener over mutual TLS serves its two classes with two
// servers: HTTP/2 connections go to net/http's, keep-alive HTTP/1.1 ones
// to a server that writes an answer in a few large writes. SplitTLS does
// the handshakes and hands each connection to its class's listener.
//
// crypto/tls writes every record with a system call of its own, so a
// bulk body leaves in writes of 16 KiB, each waking the reader on the
// other side. A BulkConn gathers the records of one Write and sends them
// in writes of up to gatherMax: in the relay benchmark
// (BenchmarkBulkBody, keep-alive over TLS) that cuts the CPU time of a
// body by about a third at both ends together.

// gatherMax bounds what a connection gathers before it writes: the most
// a connection holds beside crypto/tls's own buffers, and only while a
// Write is under way.
const gatherMax = 256 << 10

// gathers lends connections their gathering buffers while they write.
var gathers = sync.Pool{New: func() any { b := make([]byte, 0, gatherMax); return &b }}

// gatherConn is the network connection under a BulkConn's TLS: while on,
// the records crypto/tls writes are kept and written together at flush;
// otherwise (the handshake, alerts) each goes out as it comes.
type gatherConn struct {
	net.Conn
	mu  sync.Mutex
	on  bool
	buf *[]byte // lent from gathers while on
}

func (g *gatherConn) Write(p []byte) (int, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.on {
		return g.Conn.Write(p)
	}
	if g.buf == nil {
		g.buf = gathers.Get().(*[]byte)
	}
	if len(*g.buf)+len(p) > gatherMax {
		if err := g.flushLocked(); err != nil {
			return 0, err
		}
		if len(p) >= gatherMax {
			return g.Conn.Write(p)
		}
	}
	*g.buf = append(*g.buf, p...)
	return len(p), nil
}

// flushLocked writes what is gathered.
func (g *gatherConn) flushLocked() error {
	if g.buf == nil || len(*g.buf) == 0 {
		return nil
	}
	_, err := g.Conn.Write(*g.buf)
	*g.buf = (*g.buf)[:0]
	return err
}

// gather turns gathering on, or off after writing what is gathered and
// giving the buffer back.
func (g *gatherConn) gather(on bool) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	var err error
	if !on {
		err = g.flushLocked()
		if g.buf != nil {
			gathers.Put(g.buf)
			g.buf = nil
		}
	}
	g.on = on
	return err
}

// BulkConn is a server-side TLS connection whose Write sends the records
// of one call in as few system calls as gatherMax allows; every byte of a
// Write has been handed to the network when it returns, as with
// tls.Conn. Its ConnectionState is the TLS connection's.
type BulkConn struct {
	*tls.Conn
	raw *gatherConn
	wmu sync.Mutex // one Write gathers at a time
}

func (c *BulkConn) Write(p []byte) (int, error) {
	if len(p) <= 16<<10 {
		return c.Conn.Write(p) // one record: nothing to gather
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.raw.gather(true)
	n, err := c.Conn.Write(p)
	if ferr := c.raw.gather(false); err == nil && ferr != nil {
		n, err = 0, ferr
	}
	return n, err
}

// SplitTLS accepts connections on l, does their TLS handshakes with conf
// (each bounded by handshakeTimeout, none holding up the next accept), and
// hands each to h2 when it negotiated HTTP/2, else to h1 as a BulkConn.
// Closing either listener closes l and both; a connection handed over
// after that is closed.
func SplitTLS(l net.Listener, conf *tls.Config, handshakeTimeout time.Duration) (h2, h1 net.Listener) {
	s := &split{l: l, done: make(chan struct{})}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.h2 = &classListener{s: s, ch: make(chan net.Conn)}
	s.h1 = &classListener{s: s, ch: make(chan net.Conn)}
	go s.accept(conf, handshakeTimeout)
	return s.h2, s.h1
}

type split struct {
	l      net.Listener
	h2, h1 *classListener
	// ctx ends the handshakes under way when the split closes.
	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}
	once   sync.Once
	err    error // why accepting stopped; set before done closes
}

func (s *split) close(err error) {
	s.once.Do(func() {
		s.err = err
		close(s.done)
		s.cancel()
		s.l.Close()
	})
}

func (s *split) accept(conf *tls.Config, timeout time.Duration) {
	for {
		nc, err := s.l.Accept()
		if err != nil {
			if t, ok := err.(interface{ Temporary() bool }); ok && t.Temporary() {
				// Out of descriptors and the like: wait, as net/http does.
				select {
				case <-time.After(5 * time.Millisecond):
					continue
				case <-s.done:
					return
				}
			}
			s.close(err)
			return
		}
		go s.handshake(nc, conf, timeout)
	}
}

// handshake completes nc's TLS handshake and hands it to its class.
func (s *split) handshake(nc net.Conn, conf *tls.Config, timeout time.Duration) {
	raw := &gatherConn{Conn: nc}
	tc := tls.Server(raw, conf)
	ctx, cancel := context.WithTimeout(s.ctx, timeout)
	defer cancel()
	if err := tc.HandshakeContext(ctx); err != nil { // closes nc when ctx ends first
		nc.Close()
		return
	}
	to, c := s.h1, net.Conn(&BulkConn{Conn: tc, raw: raw})
	if tc.ConnectionState().NegotiatedProtocol == "h2" {
		to, c = s.h2, tc
	}
	select {
	case to.ch <- c:
	case <-s.done:
		nc.Close()
	}
}

// classListener is one class's side of a split.
type classListener struct {
	s  *split
	ch chan net.Conn
}

func (c *classListener) Accept() (net.Conn, error) {
	select {
	case nc := <-c.ch:
		return nc, nil
	case <-c.s.done:
		return nil, c.s.err
	}
}

func (c *classListener) Close() error {
	c.s.close(net.ErrClosed)
	return nil
}

func (c *classListener) Addr() net.Addr { return c.s.l.Addr() }

// TLSServer serves the peer listener over mutual TLS with a server per
// class: h2, net/http's, for HTTP/2; the data plane's own for keep-alive
// HTTP/1.1, with h2's handler and bounds (ReadHeaderTimeout also bounds a
// handshake), whose answers leave in large writes (BulkConn).
type TLSServer struct {
	conf    *tls.Config
	h2      *http.Server
	h1      *h1.Server
	closing atomic.Bool
}

// NewTLSServer returns the server of h2's handler over conf (ServerTLS).
func NewTLSServer(h2 *http.Server, conf *tls.Config, log *slog.Logger) *TLSServer {
	h2.TLSConfig = nil // the handshake is SplitTLS's
	h2.Protocols = ServerProtocols()
	return &TLSServer{conf: conf, h2: h2, h1: h1.New(h1.Config{Handler: h2.Handler, HeaderTimeout: h2.ReadHeaderTimeout,
		IdleTimeout: h2.IdleTimeout, MaxHeaderBytes: h2.MaxHeaderBytes, Logger: log})}
}

// Serve serves l until Shutdown or Close (then http.ErrServerClosed).
func (s *TLSServer) Serve(l net.Listener) error {
	h2l, h1l := SplitTLS(l, s.conf, cmp.Or(s.h2.ReadHeaderTimeout, 10*time.Second))
	errc := make(chan error, 1)
	go func() { errc <- s.h2.Serve(h2l) }()
	err := s.h1.Serve(h1l)
	h2l.Close() // either listener closes the split, and so ends the other server's Serve
	if err2 := <-errc; err == nil || errors.Is(err, http.ErrServerClosed) {
		err = err2
	}
	if s.closing.Load() {
		return http.ErrServerClosed // one server's Shutdown closed the other's listener
	}
	return err
}

// Shutdown shuts both servers down gracefully, as http.Server.Shutdown.
func (s *TLSServer) Shutdown(ctx context.Context) error {
	s.closing.Store(true)
	return errors.Join(s.h1.Shutdown(ctx), s.h2.Shutdown(ctx))
}

// Close closes both servers and their connections at once.
func (s *TLSServer) Close() error {
	s.closing.Store(true)
	return errors.Join(s.h1.Close(), s.h2.Close())
}
