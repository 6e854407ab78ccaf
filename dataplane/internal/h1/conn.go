package h1

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"runtime"
	"strconv"
	"time"
)

// readBuffer is a connection's read buffer to start with: room for a
// usual request head and a few pipelined ones. It grows, for a larger
// head, up to MaxHeaderBytes.
const readBuffer = 4 << 10

// conn is one client connection, served by one goroutine: a request is
// read, handled and answered before the next is read.
type conn struct {
	srv    *Server
	nc     net.Conn
	ctx    context.Context
	remote string
	// buf[r:w] is read and not yet taken; scan is how far the head being
	// read has been searched for its end.
	buf     []byte
	r, w    int
	scan    int
	served  int  // requests served
	closing bool // close after the current answer
	// linger: the client may still be sending what was not read (a
	// refused head, a body left unread), so the close lingers.
	linger bool
	werr   error
	resp   response
	// arrived is when the current request's head was read.
	arrived time.Time
	// tls is the connection's TLS state, nil in plain text; read from
	// tlsState once the first request arrived (its handshake done).
	tls      *tls.ConnectionState
	tlsState func() tls.ConnectionState
}

// serve serves requests until the connection closes or must.
func (c *conn) serve() {
	defer func() {
		if c.linger && c.werr == nil {
			c.lingerClose()
		}
		if c.werr == errAborted {
			reset(c.nc)
		} else {
			c.nc.Close()
		}
		c.srv.forget(c)
	}()
	for !c.closing && c.werr == nil {
		h, err := c.readHead()
		if err != nil {
			var es *errStatus
			if errors.As(err, &es) {
				c.refuse(es)
			}
			return
		}
		c.serveOne(h)
		c.served++
		if c.srv.closing.Load() {
			return
		}
	}
}

// readHead waits for the next request head and parses it.
func (c *conn) readHead() (*head, error) {
	if c.r == c.w {
		c.r, c.w, c.scan = 0, 0, 0
	}
	if c.r == c.w {
		// Nothing pipelined: wait for a first byte, idle.
		if c.served > 0 {
			if !c.srv.setIdle(c, true) {
				return nil, http.ErrServerClosed
			}
			c.nc.SetReadDeadline(time.Now().Add(c.srv.cfg.IdleTimeout))
		} else {
			c.nc.SetReadDeadline(time.Now().Add(c.srv.cfg.HeaderTimeout))
		}
		if err := c.fill(); err != nil {
			return nil, err
		}
		if c.served > 0 && !c.srv.setIdle(c, false) {
			return nil, http.ErrServerClosed
		}
	}
	timed := c.served == 0
	for {
		end, err := c.headEnd()
		if err != nil {
			return nil, err
		}
		if end >= 0 {
			b := c.buf[c.r:end]
			c.r, c.scan = end, end
			c.arrived = time.Now()
			return c.parse(b)
		}
		if !timed {
			// The head did not come whole: from its first byte it has
			// HeaderTimeout.
			timed = true
			c.nc.SetReadDeadline(time.Now().Add(c.srv.cfg.HeaderTimeout))
		}
		if err := c.fill(); err != nil {
			if isTimeout(err) && c.w > c.r {
				return nil, &errStatus{http.StatusRequestTimeout, "the request head did not arrive in time"}
			}
			return nil, err
		}
	}
}

// headEnd finds the end of the head in buf[r:w] (just past its empty
// line); -1 when it has not all arrived. Empty lines (CRLF) before a
// request line are skipped (RFC 9112 2.2).
func (c *conn) headEnd() (int, error) {
	if c.scan <= c.r {
		for c.r < c.w && c.buf[c.r] == '\r' {
			if c.r+1 == c.w {
				return -1, nil
			}
			if c.buf[c.r+1] != '\n' {
				break
			}
			c.r += 2
		}
		c.scan = c.r
		// A request starts with its method, a token: anything else (a
		// TLS handshake, as a client trying https first sends) is refused
		// now rather than after HeaderTimeout waiting for an empty line.
		if c.r < c.w && !tokenChars[c.buf[c.r]] {
			if c.buf[c.r] == tlsHandshake {
				return -1, bad("a TLS handshake on a plain HTTP port")
			}
			return -1, bad("a request line that does not start with a method")
		}
	}
	for i := c.scan; i < c.w; i++ {
		// An LF that ends an empty line (bare or not: parseHead refuses a
		// bare one) ends the head.
		if c.buf[i] == '\n' && i > c.r && (c.buf[i-1] == '\n' || c.buf[i-1] == '\r' && i-2 >= c.r && c.buf[i-2] == '\n') {
			return i + 1, nil
		}
	}
	c.scan = c.w
	if c.w-c.r > c.srv.cfg.MaxHeaderBytes {
		return -1, errHeadTooLarge(c.srv.cfg.MaxHeaderBytes)
	}
	return -1, nil
}

// tlsHandshake is the first byte of a TLS record carrying a handshake.
const tlsHandshake = 0x16

func errHeadTooLarge(limit int) *errStatus {
	return &errStatus{http.StatusRequestHeaderFieldsTooLarge, "the request head is larger than " + strconv.Itoa(limit>>10) + " KiB"}
}

// fill reads more into buf, moving what is unread to its start or
// growing it (up to MaxHeaderBytes and a little) when it is full.
func (c *conn) fill() error {
	if c.w == len(c.buf) {
		if c.r > 0 {
			n := copy(c.buf, c.buf[c.r:c.w])
			c.scan -= c.r
			c.r, c.w = 0, n
		} else {
			limit := c.srv.cfg.MaxHeaderBytes + readBuffer
			if len(c.buf) >= limit {
				return errHeadTooLarge(c.srv.cfg.MaxHeaderBytes)
			}
			nb := make([]byte, min(2*len(c.buf), limit))
			c.w = copy(nb, c.buf[c.r:c.w])
			c.buf = nb
		}
	}
	n, err := c.nc.Read(c.buf[c.w:])
	c.w += n
	if n > 0 {
		return nil
	}
	if err == nil {
		err = io.ErrNoProgress
	}
	return err
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// parse makes a request's head from b.
func (c *conn) parse(b []byte) (*head, error) {
	blk := new(block)
	h, es := parseHead(b, blk)
	if es != nil {
		return nil, es
	}
	if es := parseTarget(h.method, h.target, &blk.url); es != nil {
		return nil, es
	}
	h.url = &blk.url
	h.answer = &blk.answer
	return h, nil
}

// serveOne hands one request to the handler and ends its answer.
func (c *conn) serveOne(h *head) {
	if c.tlsState != nil && c.tls == nil {
		st := c.tlsState()
		c.tls = &st
	}
	host := h.host
	if h.url.Host != "" {
		host = h.url.Host // absolute-form: the target's authority (RFC 9112 3.2.2)
	}
	req := http.Request{
		Method: h.method, URL: h.url, Proto: h.proto, ProtoMajor: h.major, ProtoMinor: h.minor,
		Header: h.header, Body: http.NoBody, Close: h.close, Host: host,
		RemoteAddr: c.remote, RequestURI: h.target, TLS: c.tls,
	}
	var bd *body
	switch {
	case h.chunked:
		bd = &body{c: c, chunked: true, expect: h.expectContinue}
		req.ContentLength = -1
		req.TransferEncoding = []string{"chunked"}
	case h.contentLength > 0:
		bd = &body{c: c, left: h.contentLength, expect: h.expectContinue}
		req.ContentLength = h.contentLength
	}
	if bd != nil {
		req.Body = bd
		c.nc.SetReadDeadline(time.Time{}) // a body's waits are the handler's to bound
	}
	ctx, cancel := context.WithCancel(c.ctx)
	r := req.WithContext(ctx)
	w := &c.resp
	w.reset(r, h)
	c.closing = h.close
	a := h.answer
	a.w, a.gen = w, w.gen
	aborted := c.run(a, r)
	// The request's context ends first: a call the handler left running
	// that waits on it (a copy from an upstream body read with it) then
	// returns, and end does not wait on it for ever.
	cancel()
	w.end() // what the handler left running writes nothing more
	if aborted {
		c.closing = true
		c.werr = errAborted
		return
	}
	if bd != nil && !bd.finish() {
		c.closing = true // the body is left unread; what follows is no request
		c.linger = true
	}
	w.finish()
}

// errAborted ends a connection whose handler aborted its answer.
var errAborted = errors.New("h1: the handler aborted its answer")

// reset closes a connection whose answer was cut off with a TCP reset,
// and under TLS without close_notify: a client reading an answer of no
// length to the close (HTTP/1.0) must not take what came for whole.
func reset(nc net.Conn) {
	if tc, ok := nc.(*tls.Conn); ok {
		nc = tc.NetConn() // closed under TLS, which would say the end was clean
	}
	for u := nc; u != nil; {
		if l, ok := u.(interface{ SetLinger(int) error }); ok {
			l.SetLinger(0)
			break
		}
		w, ok := u.(interface{ NetConn() net.Conn })
		if !ok {
			break
		}
		u = w.NetConn()
	}
	nc.Close()
}

// run calls the handler; true when it panicked (http.ErrAbortHandler
// included), and the answer is to be cut off, not ended.
func (c *conn) run(w *answer, r *http.Request) (aborted bool) {
	defer func() {
		if p := recover(); p != nil {
			aborted = true
			if p != http.ErrAbortHandler {
				buf := make([]byte, 16<<10)
				buf = buf[:runtime.Stack(buf, false)]
				c.srv.cfg.Logger.Error("panic serving a client request", "remote", c.remote, "panic", p, "stack", string(buf))
			}
		}
	}()
	c.srv.cfg.Handler.ServeHTTP(w, r)
	return false
}

// refuse answers a request refused before its handler and closes.
func (c *conn) refuse(es *errStatus) {
	c.nc.SetWriteDeadline(time.Now().Add(time.Second))
	msg := "shardcache: " + es.msg + "\n"
	b := make([]byte, 0, 256+len(msg))
	b = appendStatusLine(b, es.status)
	b = append(b, "Connection: close\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: "...)
	b = strconv.AppendInt(b, int64(len(msg)), 10)
	b = append(b, "\r\n\r\n"...)
	b = append(b, msg...)
	if _, err := c.nc.Write(b); err == nil {
		c.linger = true
	}
}

// A lingering close reads and drops at most lingerBytes, for at most
// lingerTime.
const (
	lingerBytes = 1 << 20
	lingerTime  = 2 * time.Second
)

// lingerClose readies the close of a connection whose client may still be
// sending what the server did not read. Closed at once with unread bytes,
// the connection would be reset, and a client still writing could see the
// reset before the answer it was sent. So the sending side is shut first
// (the client reads the answer to its end), then what arrives is read and
// dropped until the client closes, lingerBytes have come or lingerTime has
// passed, as nginx's lingering close does.
// A lingering connection counts as idle: a shutdown closes it at once.
func (c *conn) lingerClose() {
	cw, ok := c.nc.(interface{ CloseWrite() error })
	if !ok || !c.srv.setIdle(c, true) || cw.CloseWrite() != nil {
		return
	}
	c.nc.SetReadDeadline(time.Now().Add(lingerTime))
	io.CopyN(io.Discard, c.nc, lingerBytes)
}

// write sends b, remembering the connection's first write error.
func (c *conn) write(b []byte) error {
	if c.werr != nil {
		return c.werr
	}
	_, err := c.nc.Write(b)
	if err != nil {
		c.werr = err
	}
	return err
}

// read reads into p from what is buffered, else from the connection.
func (c *conn) read(p []byte) (int, error) {
	if c.r < c.w {
		n := copy(p, c.buf[c.r:c.w])
		c.r += n
		c.scan = max(c.scan, c.r)
		return n, nil
	}
	return c.nc.Read(p)
}

// readLine returns the next line of at most limit bytes of a chunked
// body's framing (CRLF ended, without it) from the buffer, reading more as
// needed. A line ended by a bare LF, or holding a control byte other than
// a tab (a CR, a NUL), is errBadChunk: a server or proxy before this one
// may end the line elsewhere, and read another body (RFC 9112 7.1; net/http
// refuses the same).
func (c *conn) readLine(limit int) ([]byte, error) {
	for {
		for i := c.r; i < c.w; i++ {
			if c.buf[i] == '\n' {
				line := c.buf[c.r:i]
				c.r = i + 1
				c.scan = max(c.scan, c.r)
				n := len(line)
				if n == 0 || line[n-1] != '\r' {
					return nil, errBadChunk
				}
				line = line[:n-1]
				for _, b := range line {
					if b < ' ' && b != '\t' || b == 0x7f {
						return nil, errBadChunk
					}
				}
				return line, nil
			}
		}
		if c.w-c.r > limit {
			return nil, errLineTooLong
		}
		if err := c.fill(); err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return nil, err
		}
	}
}
