// Package h1 serves HTTP/1.1 and HTTP/1.0 on the client listener, and the
// peer listener's keep-alive class over mutual TLS: a connection-level
// server of the data plane's own, in place of net/http's for the ports
// every hit and every relayed answer cross. A connection that has a TLS
// state (crypto/tls's ConnectionState) gives it to its requests.
//
// It takes the work net/http does around a handler down to what a cache
// answer needs: a request head is parsed in place from the connection's
// buffer and copied once, its field values share one allocation with its
// URL; an answer's header is written as the handler left it, unsorted,
// with its body in the same write when both fit in one buffer
// (MaxBuffered), and a stored answer can be written from bytes serialised
// once (WriteHead). Handlers are net/http's: the same http.Handler serves
// this port and the peer listener's net/http server.
//
// Parsing is strict (parse.go): a bare LF, a folded line, a control
// character in a value, whitespace before a colon, two Content-Length
// values, Transfer-Encoding other than chunked or in an HTTP/1.0 request,
// a missing or second Host: each is refused with a status that names it,
// and the connection is closed. A request read by its chunks closes the
// connection after its answer. Keep-alive and pipelining follow RFC 9112
// 9.3: answers leave in the order their requests came.
//
// A connection is given HeaderTimeout to send a whole head once its first
// byte arrived (the first request's from the accept), IdleTimeout between
// requests; neither bounds a body or an answer, whose waits the handler
// and the listener bound (nginx's client_body_timeout and send_timeout).
package h1

import (
	"context"
	"crypto/tls"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// Config is what a Server is built from.
type Config struct {
	// Handler serves every request.
	Handler http.Handler
	// MaxHeaderBytes bounds a request head (its request line and fields);
	// a larger one is answered 431. Default 64 KiB.
	MaxHeaderBytes int
	// HeaderTimeout bounds the wait for a request's whole head from its
	// first byte (for a connection's first request, from the accept).
	// Default 10s.
	HeaderTimeout time.Duration
	// IdleTimeout bounds the wait for the next request on a kept-alive
	// connection. Default 2m.
	IdleTimeout time.Duration
	// ConnContext, when set, derives each connection's context, which
	// its requests' contexts derive from.
	ConnContext func(ctx context.Context, c net.Conn) context.Context
	// Logger gets a handler's panic and a connection's failures (at
	// debug). Default: slog.Default().
	Logger *slog.Logger
}

// Defaults of Config.
const (
	DefaultMaxHeaderBytes = 64 << 10
	DefaultHeaderTimeout  = 10 * time.Second
	DefaultIdleTimeout    = 2 * time.Minute
)

// Server serves HTTP/1.x connections from listeners.
type Server struct {
	cfg Config
	mu  sync.Mutex
	ls  map[net.Listener]struct{}
	// conns are the open connections, true while waiting for a request.
	conns   map[*conn]bool
	closing atomic.Bool
	// changed is signalled when a connection closes or goes idle while
	// the server shuts down.
	changed chan struct{}
}

// New returns a server of cfg.
func New(cfg Config) *Server {
	if cfg.MaxHeaderBytes <= 0 {
		cfg.MaxHeaderBytes = DefaultMaxHeaderBytes
	}
	if cfg.HeaderTimeout <= 0 {
		cfg.HeaderTimeout = DefaultHeaderTimeout
	}
	if cfg.IdleTimeout <= 0 {
		cfg.IdleTimeout = DefaultIdleTimeout
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Server{cfg: cfg, ls: map[net.Listener]struct{}{}, conns: map[*conn]bool{}, changed: make(chan struct{}, 1)}
}

// Serve accepts connections on l and serves each in its own goroutine
// until Shutdown or Close, when it returns http.ErrServerClosed (net/http's
// sentinel, so that callers treat both servers alike).
func (s *Server) Serve(l net.Listener) error {
	s.mu.Lock()
	if s.closing.Load() {
		s.mu.Unlock()
		return http.ErrServerClosed
	}
	s.ls[l] = struct{}{}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.ls, l)
		s.mu.Unlock()
	}()
	var backoff time.Duration
	for {
		nc, err := l.Accept()
		if err != nil {
			if s.closing.Load() {
				return http.ErrServerClosed
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() || isTemporary(err) {
				// Out of descriptors and the like: wait, as net/http does.
				backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
				time.Sleep(backoff)
				continue
			}
			return err
		}
		backoff = 0
		c := s.newConn(nc)
		if c == nil {
			nc.Close()
			continue
		}
		go c.serve()
	}
}

func isTemporary(err error) bool {
	t, ok := err.(interface{ Temporary() bool })
	return ok && t.Temporary()
}

// newConn registers a new connection; nil once the server is closing.
func (s *Server) newConn(nc net.Conn) *conn {
	ctx := context.Background()
	if s.cfg.ConnContext != nil {
		ctx = s.cfg.ConnContext(ctx, nc)
	}
	c := &conn{srv: s, nc: nc, ctx: ctx, remote: nc.RemoteAddr().String(), buf: make([]byte, readBuffer)}
	if tc, ok := nc.(interface{ ConnectionState() tls.ConnectionState }); ok {
		c.tlsState = tc.ConnectionState
	}
	c.resp.c = c
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing.Load() {
		return nil
	}
	s.conns[c] = false // not idle: its first request has HeaderTimeout to come
	return c
}

// setIdle marks c waiting for a request (idle) or serving one; false when
// the server is shutting down and c is to close rather than wait.
func (s *Server) setIdle(c *conn, idle bool) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if idle && s.closing.Load() {
		return false
	}
	s.conns[c] = idle
	return true
}

func (s *Server) forget(c *conn) {
	s.mu.Lock()
	delete(s.conns, c)
	s.mu.Unlock()
	if s.closing.Load() {
		select {
		case s.changed <- struct{}{}:
		default:
		}
	}
}

// Shutdown stops accepting, closes the idle connections, and waits for the
// others to finish the request they serve (answered with Connection:
// close), or for ctx to end, when it returns ctx's error and Close is the
// caller's to call.
func (s *Server) Shutdown(ctx context.Context) error {
	s.closeListeners()
	for {
		s.mu.Lock()
		for c, idle := range s.conns {
			if idle {
				c.nc.Close()
			}
		}
		left := len(s.conns)
		s.mu.Unlock()
		if left == 0 {
			return nil
		}
		select {
		case <-s.changed:
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond): // a connection that went idle
		}
	}
}

// Close stops accepting and closes every connection at once.
func (s *Server) Close() error {
	s.closeListeners()
	s.mu.Lock()
	defer s.mu.Unlock()
	for c := range s.conns {
		c.nc.Close()
	}
	return nil
}

func (s *Server) closeListeners() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closing.Store(true)
	for l := range s.ls {
		l.Close()
	}
}
