package relay

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"net/textproto"
	"sync"
	"time"
)

// aLongTimeAgo is a deadline in the past: set on a connection, it ends
// the Read or Write blocked on it.
var aLongTimeAgo = time.Unix(1, 0)

// errNothingBack marks an exchange that failed before the peer sent a
// byte: on a reused connection the peer may have closed it while idle, so
// the request is sent again, once, on a new one. (Relayed requests have no
// body and are GET or HEAD: sending one twice changes nothing.)
var errNothingBack = errors.New("relay: the peer sent nothing back")

// roundTripH1 relays req over a keep-alive connection to req.URL.Host.
// It returns errAtBound, having sent nothing, when every connection the
// peer may have is busy.
func (c *Client) roundTripH1(req *http.Request) (*http.Response, error) {
	ctx := req.Context()
	trace := httptrace.ContextClientTrace(ctx)
	for attempt := 0; ; attempt++ {
		cn, err := c.pools.get(ctx, req.URL.Host)
		if err != nil {
			return nil, err
		}
		if trace != nil && trace.GotConn != nil {
			trace.GotConn(httptrace.GotConnInfo{Conn: cn.nc, Reused: cn.reused, WasIdle: cn.reused})
		}
		resp, err := c.exchange(ctx, cn, req, trace)
		if err == nil {
			return resp, nil
		}
		c.pools.discard(cn)
		if cerr := ctx.Err(); cerr != nil {
			return nil, fmt.Errorf("%w (%w)", cerr, err)
		}
		if !errors.Is(err, errNothingBack) || !cn.reused || attempt > 0 {
			return nil, err
		}
	}
}

// exchange writes req on cn and reads the answer's header. The answer's
// body, when it has one, returns cn to the pool once read to its end.
func (c *Client) exchange(ctx context.Context, cn *conn, req *http.Request, trace *httptrace.ClientTrace) (*http.Response, error) {
	stop := context.AfterFunc(ctx, func() { cn.nc.SetDeadline(aLongTimeAgo) })
	if err := writeRequest(cn.bw, req); err != nil {
		stop()
		return nil, fmt.Errorf("%w: %w", errNothingBack, err)
	}
	if trace != nil && trace.WroteHeaders != nil {
		trace.WroteHeaders()
	}
	// A peer that sends nothing for a while is asked whether it answers
	// at all (health.go): a paused or partitioned peer is noticed within
	// seconds, not after the relay timeout.
	cn.probe.Reset(c.probeAfter)
	_, err := cn.br.Peek(1)
	cn.probe.Stop()
	if err != nil {
		stop()
		return nil, fmt.Errorf("%w: %w", errNothingBack, err)
	}
	if trace != nil && trace.GotFirstResponseByte != nil {
		trace.GotFirstResponseByte()
	}
	var resp *http.Response
	for {
		if resp, err = http.ReadResponse(cn.br, req); err != nil {
			stop()
			return nil, err
		}
		code := resp.StatusCode
		if code >= 200 {
			break
		}
		if code == http.StatusSwitchingProtocols {
			stop()
			return nil, errors.New("relay: the peer switched protocols unasked")
		}
		if trace != nil && trace.Got1xxResponse != nil {
			if err := trace.Got1xxResponse(code, textproto.MIMEHeader(resp.Header)); err != nil {
				stop()
				return nil, err
			}
		}
	}
	closeAfter := resp.Close || req.Close
	if resp.Body == http.NoBody {
		c.release(cn, stop, closeAfter)
		return resp, nil
	}
	resp.Body = &body{rc: resp.Body, ctx: ctx, c: c, cn: cn, stop: stop, left: resp.ContentLength, closeAfter: closeAfter}
	return resp, nil
}

// release ends an exchange whose answer was read whole: cn goes back to
// the pool unless the answer closes it or the context has ended it.
func (c *Client) release(cn *conn, stop func() bool, closeAfter bool) {
	if !stop() || closeAfter {
		c.pools.discard(cn)
		return
	}
	c.pools.put(cn)
}

// writeRequest writes a relayed request's header: the request line, Host
// and the fields (checked by checkHeader before). Relayed requests have no
// body.
func writeRequest(bw *bufio.Writer, req *http.Request) error {
	host := req.Host
	if host == "" {
		host = req.URL.Host
	}
	bw.WriteString(req.Method)
	bw.WriteByte(' ')
	bw.WriteString(req.URL.RequestURI())
	bw.WriteString(" HTTP/1.1\r\nHost: ")
	bw.WriteString(host)
	bw.WriteString("\r\n")
	for k, vs := range req.Header {
		if skipped(k) {
			continue
		}
		for _, v := range vs {
			bw.WriteString(k)
			bw.WriteString(": ")
			bw.WriteString(v)
			bw.WriteString("\r\n")
		}
	}
	bw.WriteString("\r\n")
	return bw.Flush()
}

// body is a keep-alive answer's body. Read to its end, it returns the
// connection to the pool; closed before, it closes the connection, unless
// what is left of it is already buffered.
type body struct {
	mu         sync.Mutex // held by Read; Close does not wait for it
	rc         io.ReadCloser
	ctx        context.Context
	c          *Client
	cn         *conn
	stop       func() bool
	left       int64 // bytes of a known length still to come; -1: unknown
	closeAfter bool
	done       bool
	err        error // what Read returns once done
}

// errBodyClosed is what a Read after Close returns.
var errBodyClosed = errors.New("relay: read on a closed answer body")

func (b *body) Read(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.done {
		return 0, b.err
	}
	n, err := b.rc.Read(p)
	if b.left >= 0 {
		b.left -= int64(n)
	}
	switch {
	case err == io.EOF:
		b.finishLocked(true, io.EOF)
	case err != nil:
		if cerr := b.ctx.Err(); cerr != nil {
			err = fmt.Errorf("%w (%w)", cerr, err)
		}
		b.finishLocked(false, err)
	}
	return n, err
}

// finishLocked ends the exchange: clean, the connection may carry another.
func (b *body) finishLocked(clean bool, err error) {
	b.done, b.err = true, err
	if clean {
		b.c.release(b.cn, b.stop, b.closeAfter)
		return
	}
	b.stop()
	b.c.pools.discard(b.cn)
}

// Close ends the exchange. A Read running in another goroutine is ended
// by closing the connection under it.
func (b *body) Close() error {
	if !b.mu.TryLock() {
		b.cn.nc.Close() // the Read fails, and discards the connection
		return nil
	}
	defer b.mu.Unlock()
	if b.done {
		return nil
	}
	if b.left >= 0 && b.left <= int64(b.cn.br.Buffered()) {
		// The rest is here already: read it, and the connection
		// carries the next exchange.
		if _, err := io.Copy(io.Discard, b.rc); err == nil {
			b.finishLocked(true, errBodyClosed)
			return nil
		}
	}
	b.finishLocked(false, errBodyClosed)
	return nil
}
