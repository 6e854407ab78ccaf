// Package h1client is the client side of one HTTP/1.1 exchange on a
// keep-alive connection its caller pools: the request's head written in
// one system call, the answer's header read (1xx interim answers passed to
// the request's trace), and a body that hands the connection back once it
// is read to its end. No goroutine per connection and no channel sit
// between the caller and the wire: the goroutine that asks writes and
// reads. The peer hop (relay) and the origin client use it.
package h1client

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/textproto"
	"sync"
	"sync/atomic"
	"time"
)

// ALongTimeAgo is a deadline in the past: set on a connection, it ends
// the Read or Write blocked on it.
var ALongTimeAgo = time.Unix(1, 0)

// ErrNothingBack marks an exchange that failed before the server sent a
// byte: on a reused connection the server may have closed it while idle,
// so a request that may be sent twice (no body, GET or HEAD) is sent
// again, once, on a new connection.
var ErrNothingBack = errors.New("the server sent nothing back")

// ErrBodyClosed is what a Read after Close returns.
var ErrBodyClosed = errors.New("read on a closed answer body")

// Conn is one keep-alive connection.
type Conn struct {
	NC     net.Conn
	BR     *bufio.Reader
	BW     *bufio.Writer
	Reused bool // it carried an exchange before this one
}

// Keeper is what an exchange needs of the one who pools its connection.
type Keeper interface {
	// WriteRequest writes the request's head to bw and flushes it.
	WriteRequest(bw *bufio.Writer, req *http.Request) error
	// Awaiting is called once the request is written, before the answer's
	// header is read; Arrived when its first byte came; Awaited as soon as
	// the header is read or its read failed (a timer started, then
	// stopped), with the read's error. What Awaited returns is the
	// exchange's error: nil, it goes on.
	Awaiting()
	Arrived()
	Awaited(err error) error
	// End is called once as the exchange ends cleanly (an answer read
	// whole, or whose body was already buffered when closed): reuse says
	// the connection may carry another exchange (nothing follows the
	// answer: a server that sent more than the answer's framing says is
	// not trusted with another). A body whose Read fails, or that is
	// closed before its end, closes the connection and calls End(false).
	// When Do fails, the connection is the caller's to close.
	End(reuse bool)
}

// Do writes req on cn and reads the answer's header. The answer's body,
// when it has one, calls k.End once read to its end. When Do fails the
// connection cannot be reused; the error wraps ErrNothingBack when the
// server sent nothing back.
func Do(ctx context.Context, cn *Conn, req *http.Request, k Keeper) (*http.Response, error) {
	trace := httptrace.ContextClientTrace(ctx)
	if trace != nil && trace.GotConn != nil {
		trace.GotConn(httptrace.GotConnInfo{Conn: cn.NC, Reused: cn.Reused, WasIdle: cn.Reused})
	}
	stop := context.AfterFunc(ctx, func() { cn.NC.SetDeadline(ALongTimeAgo) })
	if err := k.WriteRequest(cn.BW, req); err != nil {
		stop()
		return nil, fmt.Errorf("%w: %w", ErrNothingBack, err)
	}
	if trace != nil && trace.WroteHeaders != nil {
		trace.WroteHeaders()
	}
	k.Awaiting()
	resp, err := readHeader(cn, req, trace, k)
	if err = k.Awaited(err); err != nil {
		stop()
		return nil, err
	}
	closeAfter := resp.Close || req.Close
	if resp.Body == http.NoBody {
		k.End(stop() && !closeAfter && cn.BR.Buffered() == 0)
		return resp, nil
	}
	resp.Body = &body{rc: resp.Body, ctx: ctx, cn: cn, stop: stop, k: k, left: resp.ContentLength, closeAfter: closeAfter}
	return resp, nil
}

// readHeader reads the answer's header, passing 1xx interim answers to
// trace.
func readHeader(cn *Conn, req *http.Request, trace *httptrace.ClientTrace, k Keeper) (*http.Response, error) {
	if _, err := cn.BR.Peek(1); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNothingBack, err)
	}
	k.Arrived()
	if trace != nil && trace.GotFirstResponseByte != nil {
		trace.GotFirstResponseByte()
	}
	for {
		resp, err := http.ReadResponse(cn.BR, req)
		if err != nil {
			return nil, err
		}
		code := resp.StatusCode
		if code >= 200 {
			return resp, nil
		}
		if code < 100 {
			// No such status. Taken for an interim answer, its body would
			// be read as the answer (net/http returns it as final, body
			// included): refused instead.
			return nil, fmt.Errorf("malformed answer: status %03d", code)
		}
		if code == http.StatusSwitchingProtocols {
			return nil, errors.New("the server switched protocols unasked")
		}
		if trace != nil && trace.Got1xxResponse != nil {
			if err := trace.Got1xxResponse(code, textproto.MIMEHeader(resp.Header)); err != nil {
				return nil, err
			}
		}
	}
}

// body is a keep-alive answer's body. Read to its end, it hands the
// connection back; closed before, it closes the connection, unless what
// is left of it is already buffered.
type body struct {
	mu sync.Mutex // held by Read; Close does not wait for it
	// state orders the end of the exchange against a Close that could not
	// take mu: whichever moves it from open first decides what becomes of
	// the connection.
	state      atomic.Int32
	rc         io.ReadCloser
	ctx        context.Context
	cn         *Conn
	stop       func() bool
	k          Keeper
	left       int64 // bytes of a known length still to come; -1: unknown
	closeAfter bool
	err        error // what Read returns once ended; set under mu
}

// A body's states.
const (
	bodyOpen    = iota
	bodyClosing // Close is closing the connection under a Read
	bodyEnded   // the exchange ended: the connection is no longer the body's
)

func (b *body) Read(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.state.Load() == bodyEnded {
		return 0, b.err
	}
	n, err := b.rc.Read(p)
	if b.left >= 0 {
		b.left -= int64(n)
	}
	switch {
	case err == io.EOF:
		b.endLocked(true, io.EOF)
	case err != nil:
		if cerr := b.ctx.Err(); cerr != nil {
			err = fmt.Errorf("%w (%w)", cerr, err)
		}
		b.endLocked(false, err)
	}
	return n, err
}

// endLocked ends the exchange: clean, the connection may carry another,
// unless a Close is closing it meanwhile.
func (b *body) endLocked(clean bool, err error) {
	b.err = err
	if b.state.Swap(bodyEnded) == bodyClosing {
		clean = false
	}
	if clean {
		b.k.End(b.stop() && !b.closeAfter && b.cn.BR.Buffered() == 0)
		return
	}
	b.stop()
	b.cn.NC.Close()
	b.k.End(false)
}

// Close ends the exchange. A Read running in another goroutine is ended
// by closing the connection under it, unless that Read has just ended the
// exchange (the connection may carry another already).
func (b *body) Close() error {
	if !b.mu.TryLock() {
		if b.state.CompareAndSwap(bodyOpen, bodyClosing) {
			b.cn.NC.Close() // the Read fails, and ends the exchange
		}
		return nil
	}
	defer b.mu.Unlock()
	if b.state.Load() == bodyEnded {
		return nil
	}
	if b.left >= 0 && b.left <= int64(b.cn.BR.Buffered()) {
		// The rest is here already: read it, and the connection
		// carries the next exchange.
		if _, err := io.Copy(io.Discard, b.rc); err == nil {
			b.endLocked(true, ErrBodyClosed)
			return nil
		}
	}
	b.endLocked(false, ErrBodyClosed)
	return nil
}
