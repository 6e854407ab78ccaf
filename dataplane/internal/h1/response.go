package h1

import (
	"bytes"
	"io"
	"maps"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// An answer's bytes gather in one buffer (out): the head once the framing
// is known, then the body, written out when the buffer would pass
// MaxBuffered, on Flush, when the handler returns, and as it comes when
// the body is copied from a stream (ReadFrom). An answer of a head and a
// body written whole leaves in one write.
//
// The framing: the handler's Content-Length when it set one; else, for an
// answer the handler finished before writing stageMax bytes, the length it
// wrote; else chunked (HTTP/1.1) or delimited by the close (HTTP/1.0).
// HEAD, 1xx, 204 and 304 answers carry no body.

// MaxBuffered is the most an answer holds before writing it out.
const MaxBuffered = 64 << 10

// stageMax is how much of a body with no length given is held to learn
// its length.
const stageMax = 4 << 10

// buffers holds answer buffers between answers, so that an idle
// connection holds none.
var buffers = sync.Pool{New: func() any { b := make([]byte, 0, 16<<10); return &b }}

// response is a connection's answer, reused request after request; a
// handler writes it through an answer of the request's generation.
type response struct {
	c      *conn
	req    *http.Request
	header http.Header // made when asked for, never shared by two answers
	// live guards gen, the generation of the answer a handler is
	// writing, and calls, how many of its calls are under way; end waits
	// on idle (ending) for them to return.
	live   sync.Mutex
	gen    uint64
	calls  int
	ending bool
	idle   sync.Cond
	// mu orders the head against a 100 Continue sent while the body is
	// read on another goroutine.
	mu        sync.Mutex
	status    int
	committed bool
	chunked   bool
	isHead    bool
	stream    bool  // ReadFrom is copying a stream: written out as it comes
	bodyOK    bool  // the status allows a body
	declared  int64 // the Content-Length sent; -1: none
	written   int64
	raw       []byte // header fields Answer was given, written after header's
	rawLen    int64  // the length Answer was given; -1: none
	stage     []byte
	buf       *[]byte
	out       []byte
}

func (w *response) reset(r *http.Request, h *head) {
	w.req, w.status, w.committed, w.chunked = r, 0, false, false
	w.isHead, w.bodyOK, w.declared, w.written = h.method == http.MethodHead, true, -1, 0
	w.raw, w.rawLen = nil, -1
	w.stage = w.stage[:0]
}

// Header is the answer's header, to set before WriteHeader.
func (w *response) Header() http.Header {
	if w.header == nil {
		// No size hint: a hit sets a few fields (the front's), which a
		// small map holds in one allocation; a miss's grows it once.
		w.header = make(http.Header)
	}
	return w.header
}

// Arrived is when the request's head was read: the answer's Date, and a
// clock reading a handler can take instead of its own.
func (w *response) Arrived() time.Time { return w.c.arrived }

// WriteHeader sets the answer's status (a 1xx other than 101 is sent at
// once, as an interim answer, with the header fields set so far, to an
// HTTP/1.1 client; a 101 is a 502).
func (w *response) WriteHeader(code int) {
	if code < 100 || code > 999 {
		panic("h1: invalid WriteHeader code " + strconv.Itoa(code))
	}
	if w.committed || w.status != 0 {
		return
	}
	if code == http.StatusSwitchingProtocols {
		// This server switches to no other protocol (there is no
		// Hijack): a 101 sent on, from an origin that switched unasked,
		// would have a proxy before the node pass later bytes through as
		// a tunnel, unchecked, while this server reads them as requests.
		// It is answered as a bad gateway, and the connection closed.
		code = http.StatusBadGateway
		w.c.closing = true
		delete(w.header, "Upgrade")
	}
	if code < 200 {
		if w.req.ProtoMinor >= 1 {
			// An HTTP/1.0 client (or proxy) would take it for the
			// answer (RFC 9110 15.2: none is sent to it).
			w.interim(code)
		}
		return
	}
	w.status = code
	w.bodyOK = code != http.StatusNoContent && code != http.StatusNotModified && code >= 200
}

func (w *response) interim(code int) {
	h := w.header
	for _, name := range framingFields {
		if _, ok := h[name]; ok {
			// The framing is the final answer's, and the server's: a 1xx
			// has none (RFC 9110 8.6, RFC 9112 6.1), and a proxy before
			// the node that took it would misread what follows.
			h = maps.Clone(h)
			for _, name := range framingFields {
				delete(h, name)
			}
			break
		}
	}
	b := appendStatusLine(make([]byte, 0, 512), code)
	b = appendFields(b, h)
	b = append(b, "\r\n"...)
	w.mu.Lock()
	defer w.mu.Unlock()
	w.c.write(b)
}

// framingFields are the fields of the server's that an interim answer
// leaves out.
var framingFields = [...]string{"Content-Length", "Transfer-Encoding", "Connection"}

// sendContinue sends 100 Continue unless the answer has begun: false
// then.
func (w *response) sendContinue() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.committed {
		return false
	}
	w.c.nc.Write([]byte("HTTP/1.1 100 Continue\r\n\r\n"))
	return true
}

// Write writes body bytes.
func (w *response) Write(p []byte) (int, error) {
	if w.c.werr != nil {
		return 0, w.c.werr
	}
	if w.status == 0 {
		w.WriteHeader(http.StatusOK)
	}
	if !w.bodyOK {
		return 0, http.ErrBodyNotAllowed
	}
	if !w.committed {
		if _, given := w.header["Content-Length"]; !given && !w.stream && int(w.written)+len(w.stage)+len(p) <= stageMax {
			if w.isHead {
				w.written += int64(len(p)) // counted for the length a GET would have
			} else {
				w.stage = append(w.stage, p...)
			}
			return len(p), nil
		}
		w.commit(false)
	}
	return w.body(p)
}

// Answer writes a whole answer at once: its status, the fields set in
// Header, then head (field lines, each ending in CRLF, with none of
// Content-Length, Transfer-Encoding or Connection: the server's; a Date
// in head is sent instead of the server's),
// and body, whose length is sent as Content-Length. A stored answer is
// sent this way with no header map filled. It reports false, having
// written nothing, when the answer has begun already.
func (w *response) Answer(status int, head, body []byte) bool {
	if w.committed || w.status != 0 || status < 200 {
		return false
	}
	w.WriteHeader(status)
	w.raw, w.rawLen = head, int64(len(body))
	if !w.bodyOK {
		w.rawLen = -1
	}
	w.commit(false)
	w.raw = nil
	if w.bodyOK {
		w.body(body)
	}
	return true
}

// body writes p after the head.
func (w *response) body(p []byte) (int, error) {
	if w.isHead {
		w.written += int64(len(p))
		return len(p), nil
	}
	var err error
	if w.declared >= 0 && w.written+int64(len(p)) > w.declared {
		p, err = p[:w.declared-w.written], http.ErrContentLength
	}
	if len(p) == 0 {
		return 0, err
	}
	w.written += int64(len(p))
	if w.chunked {
		w.out = strconv.AppendInt(w.out, int64(len(p)), 16)
		w.out = append(w.out, "\r\n"...)
	}
	if len(w.out)+len(p) > MaxBuffered {
		if werr := w.flushOut(); werr != nil {
			return 0, werr
		}
	}
	if len(p) >= MaxBuffered {
		if werr := w.c.write(p); werr != nil {
			return 0, werr
		}
	} else {
		w.out = append(w.out, p...)
	}
	if w.chunked {
		w.out = append(w.out, "\r\n"...)
	}
	if w.stream {
		if werr := w.flushOut(); werr != nil {
			return 0, werr
		}
	}
	return len(p), err
}

// ReadFrom writes src as body bytes: a file of a length already sent by
// the connection's ReadFrom (sendfile), the rest through Write.
func (w *response) ReadFrom(src io.Reader) (int64, error) {
	if w.status == 0 {
		w.WriteHeader(http.StatusOK)
	}
	file := false
	if lr, ok := src.(*io.LimitedReader); ok && w.bodyOK && !w.isHead {
		file = isFile(lr.R)
		rf, can := w.c.nc.(io.ReaderFrom)
		if _, given := w.header["Content-Length"]; file && can && (given || w.committed) {
			if !w.committed {
				w.commit(false)
			}
			if !w.chunked && w.declared >= 0 {
				if err := w.flushOut(); err != nil {
					return 0, err
				}
				n, err := rf.ReadFrom(&io.LimitedReader{R: lr.R, N: min(lr.N, w.declared-w.written)})
				lr.N -= n
				w.written += n
				if err != nil {
					w.c.werr = err
				}
				return n, err
			}
		}
	}
	if file {
		// A file the connection cannot send itself (TLS) is no stream:
		// it goes out in large writes, as it is read.
		buf := fileBuffers.Get().(*[fileChunk]byte)
		defer fileBuffers.Put(buf)
		return io.CopyBuffer(writerOnly{w}, src, buf[:])
	}
	// A body read from a stream (a fill, a relay) goes out as it comes,
	// as net/http's does: a client sees its first bytes before its last
	// have arrived.
	w.stream = true
	defer func() { w.stream = false }()
	buf := buffers.Get().(*[]byte)
	defer buffers.Put(buf)
	return io.CopyBuffer(writerOnly{w}, src, (*buf)[:cap(*buf)])
}

// isFile reports whether r is a file that sendfile can read: a
// descriptor that is not a connection (an *os.File, a stored body).
func isFile(r io.Reader) bool {
	_, sc := r.(syscall.Conn)
	_, nc := r.(net.Conn)
	return sc && !nc
}

// fileChunk is how much of a file is read and written at a time when the
// connection cannot take it by sendfile.
const fileChunk = 256 << 10

// fileBuffers lends those chunks.
var fileBuffers = sync.Pool{New: func() any { return new([fileChunk]byte) }}

// writerOnly hides a response's ReadFrom from io.CopyBuffer.
type writerOnly struct{ io.Writer }

// Flush sends what is written so far.
func (w *response) Flush() { w.FlushError() }

// FlushError sends what is written so far (http.ResponseController's
// Flush).
func (w *response) FlushError() error {
	if w.status == 0 {
		w.WriteHeader(http.StatusOK)
	}
	if !w.committed {
		w.commit(false)
	}
	return w.flushOut()
}

// SetReadDeadline and SetWriteDeadline are http.ResponseController's.
func (w *response) SetReadDeadline(t time.Time) error  { return w.c.nc.SetReadDeadline(t) }
func (w *response) SetWriteDeadline(t time.Time) error { return w.c.nc.SetWriteDeadline(t) }

func (w *response) flushOut() error {
	if len(w.out) == 0 {
		return w.c.werr
	}
	err := w.c.write(w.out)
	w.out = w.out[:0]
	return err
}

// commit writes the head into out, the framing decided: final says the
// handler has returned, so a body held in stage is all there is.
func (w *response) commit(final bool) {
	w.mu.Lock()
	w.committed = true
	w.mu.Unlock()
	if w.buf == nil {
		w.buf = buffers.Get().(*[]byte)
		w.out = (*w.buf)[:0]
	}
	h := w.header
	if v, ok := h["Connection"]; ok {
		for _, s := range v {
			if hasToken(s, "close") {
				w.c.closing = true
			}
		}
		delete(h, "Connection")
	}
	delete(h, "Transfer-Encoding")
	w.declared = w.rawLen
	if v, ok := h["Content-Length"]; ok {
		delete(h, "Content-Length")
		if n, err := strconv.ParseInt(strings.TrimSpace(strings.Join(v, "")), 10, 64); err == nil && n >= 0 && len(v) == 1 && w.rawLen < 0 {
			w.declared = n
		}
	}
	switch {
	case w.status < 200 || w.status == http.StatusNoContent:
		w.declared = -1
	case w.status == http.StatusNotModified:
		// A given length describes the selected representation; none
		// is made up.
	case w.isHead:
		if w.declared < 0 && final && w.written > 0 {
			w.declared = w.written
		}
	case w.declared < 0 && final:
		w.declared = int64(len(w.stage))
	case w.declared < 0 && w.req.ProtoMinor >= 1:
		w.chunked = true
	case w.declared < 0:
		w.c.closing = true // HTTP/1.0: the close ends the body
	}
	if w.c.srv.closing.Load() {
		w.c.closing = true
	}
	b := appendStatusLine(w.out, w.status)
	if _, ok := h["Date"]; !ok && !headHas(w.raw, "Date") {
		b = append(b, "Date: "...)
		b = appendDate(b, w.c.arrived)
		b = append(b, "\r\n"...)
	}
	b = appendFields(b, h)
	b = append(b, w.raw...)
	if w.declared >= 0 {
		b = append(b, "Content-Length: "...)
		b = strconv.AppendInt(b, w.declared, 10)
		b = append(b, "\r\n"...)
	}
	if w.chunked {
		b = append(b, "Transfer-Encoding: chunked\r\n"...)
	}
	switch {
	case w.c.closing:
		b = append(b, "Connection: close\r\n"...)
	case w.req.ProtoMinor == 0:
		b = append(b, "Connection: keep-alive\r\n"...)
	}
	w.out = append(b, "\r\n"...)
	if len(w.stage) > 0 {
		stage := w.stage
		w.stage = w.stage[:0]
		w.written = 0
		w.body(stage)
	}
}

// finish ends the answer once the handler returned, and readies the
// response for the connection's next request.
func (w *response) finish() {
	if w.status == 0 {
		w.WriteHeader(http.StatusOK)
	}
	if !w.committed {
		w.commit(true)
	}
	if w.chunked {
		w.out = append(w.out, "0\r\n\r\n"...)
	}
	if w.declared >= 0 && w.bodyOK && !w.isHead && w.written < w.declared {
		w.c.closing = true // a body shorter than its length: the client is to see it cut
	}
	w.flushOut()
	if w.buf != nil {
		*w.buf = w.out[:0]
		if cap(w.out) <= MaxBuffered+16<<10 {
			buffers.Put(w.buf)
		}
		w.buf, w.out = nil, nil
	}
	// A new map for the next answer: a handler's goroutine may hold
	// this one still.
	w.header = nil
	w.req = nil
}

// appendFields appends h's fields, each value a line; names that are no
// field names are left out, CR and LF in values become spaces.
func appendFields(b []byte, h http.Header) []byte {
	for k, vv := range h {
		if !validName(k) {
			continue
		}
		for _, v := range vv {
			b = append(b, k...)
			b = append(b, ": "...)
			if strings.ContainsAny(v, "\r\n") {
				v = strings.NewReplacer("\r", " ", "\n", " ").Replace(v)
			}
			b = append(b, strings.TrimSpace(v)...)
			b = append(b, "\r\n"...)
		}
	}
	return b
}

func validName(k string) bool {
	if k == "" {
		return false
	}
	for i := 0; i < len(k); i++ {
		if !tokenChars[k[i]] {
			return false
		}
	}
	return true
}

// hasToken reports whether the comma-separated list v holds token, in any
// case.
func hasToken(v, token string) bool {
	for part := range strings.SplitSeq(v, ",") {
		if strings.EqualFold(strings.TrimSpace(part), token) {
			return true
		}
	}
	return false
}

// statusLines are the status lines of the usual statuses, made once.
var statusLines = func() map[int]string {
	m := map[int]string{}
	for _, code := range []int{100, 103, 200, 204, 206, 301, 302, 303, 304, 307, 308, 400, 401, 403, 404, 405, 408,
		412, 413, 414, 416, 429, 431, 500, 501, 502, 503, 504, 505, 508} {
		m[code] = "HTTP/1.1 " + strconv.Itoa(code) + " " + http.StatusText(code) + "\r\n"
	}
	return m
}()

func appendStatusLine(b []byte, code int) []byte {
	if line, ok := statusLines[code]; ok {
		return append(b, line...)
	}
	b = append(b, "HTTP/1.1 "...)
	b = strconv.AppendInt(b, int64(code), 10)
	b = append(b, ' ')
	if text := http.StatusText(code); text != "" {
		b = append(b, text...)
	} else {
		b = append(b, "status code "...)
		b = strconv.AppendInt(b, int64(code), 10)
	}
	return append(b, "\r\n"...)
}

// dateCache is the Date of the current second, formatted once a second.
type dateCache struct {
	sec int64
	b   []byte
}

var date atomic.Pointer[dateCache]

func appendDate(b []byte, now time.Time) []byte {
	sec := now.Unix()
	if d := date.Load(); d != nil && d.sec == sec {
		return append(b, d.b...)
	}
	d := &dateCache{sec: sec, b: now.UTC().AppendFormat(nil, http.TimeFormat)}
	date.Store(d)
	return append(b, d.b...)
}

// headHas reports whether head, field lines each ending in CRLF, holds a
// line of field name (as spelled).
func headHas(head []byte, name string) bool {
	for len(head) > len(name) {
		if head[len(name)] == ':' && string(head[:len(name)]) == name {
			return true
		}
		i := bytes.IndexByte(head, '\n')
		if i < 0 {
			return false
		}
		head = head[i+1:]
	}
	return false
}
