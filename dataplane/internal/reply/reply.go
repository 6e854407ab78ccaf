// Package reply holds the writer's side of an answer, shared by the front
// and the owner: the recorder the handlers wrap their ResponseWriter in, a
// body that breaks off (BreakOff, Pass), and the writer of work no client
// waits on (Discard). It imports nothing of the data plane.
package reply

import (
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/textproto"
	"syscall"
)

// ErrBrokenOff says a response broke off after its header was sent.
var ErrBrokenOff = errors.New("reply: the body broke off after the header was sent")

// Breaker is a ResponseWriter that can be broken off: whatever is written
// to it after is dropped, and its owner ends the transfer as broken.
type Breaker interface{ BreakOff() }

// BreakOff ends a response whose header is sent so that whoever reads it
// sees a broken transfer, never a short body taken for whole. The writer
// that can tell (a Recorder, whose handler then aborts the client's
// connection; Discard) is told, and ErrBrokenOff is returned for the
// caller to stop with. A writer of net/http's own, which no handler
// wrapped, is aborted at once.
func BreakOff(w http.ResponseWriter) error {
	for {
		if b, ok := w.(Breaker); ok {
			b.BreakOff()
			return ErrBrokenOff
		}
		u, ok := w.(interface{ Unwrap() http.ResponseWriter })
		if !ok {
			panic(http.ErrAbortHandler)
		}
		w = u.Unwrap()
	}
}

// Pass copies an upstream body (the origin's or a peer's) to w. When the
// upstream breaks off, so does w's answer: the client sees a broken
// transfer, never a short body taken for whole, which an answer of unknown
// length would otherwise be. It returns the bytes copied and whether the
// upstream broke off.
func Pass(w http.ResponseWriter, body io.Reader) (int64, bool) {
	src := &ErrReader{R: body}
	nb, _ := Copy(w, src)
	if src.Err != nil {
		_ = BreakOff(w) // nothing more is written
		return nb, true
	}
	return nb, false
}

// ErrReader remembers its reader's error, to tell a broken source from a
// client that went away.
type ErrReader struct {
	R   io.Reader
	Err error
}

func (e *ErrReader) Read(p []byte) (int, error) {
	n, err := e.R.Read(p)
	if err != nil && err != io.EOF {
		e.Err = err
	}
	return n, err
}

// CopyHeader adds src's fields to dst, sharing their value slices.
func CopyHeader(dst, src http.Header) {
	for k, v := range src {
		dst[k] = v
	}
}

// IsWriteError reports whether err came from writing to the client.
func IsWriteError(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) || errors.Is(err, http.ErrHandlerTimeout) || errors.Is(err, syscall.EPIPE) || errors.Is(err, syscall.ECONNRESET)
}

// BodyAllowed reports whether a response with status has a body.
func BodyAllowed(status int) bool {
	return status >= 200 && status != http.StatusNoContent && status != http.StatusNotModified
}

// Discard is the ResponseWriter of work no client waits on: a background
// revalidation, a pre-copy.
type Discard struct{ H http.Header }

// NewDiscard returns a Discard with an empty header.
func NewDiscard() Discard { return Discard{H: http.Header{}} }

// BreakOff: nobody reads a discarded answer.
func (Discard) BreakOff() {}

func (d Discard) Header() http.Header         { return d.H }
func (d Discard) Write(b []byte) (int, error) { return len(b), nil }
func (d Discard) WriteHeader(int)             {}

// Recorder notes the status and body bytes written, for metrics, and
// whether the answer broke off.
type Recorder struct {
	http.ResponseWriter
	Status int
	Bytes  int64
	wrote  bool
	Key    string // the cache key, once known
	// Strip are header fields (canonical) removed from the answer before
	// it is sent: the cluster's own targeted cache-control field.
	Strip []string
	// ID, when set, is the request's id, the answer's X-Request-Id as it
	// is sent: whatever a stored or relayed answer carried is replaced.
	ID []string
	// Broken is set by BreakOff: the body broke off after the header was
	// sent; nothing more is written, and the handler aborts the transfer.
	Broken bool
}

// NewRecorder wraps w; the status is 200 until one is written.
func NewRecorder(w http.ResponseWriter) *Recorder {
	return &Recorder{ResponseWriter: w, Status: http.StatusOK}
}

// BreakOff marks the answer broken.
func (r *Recorder) BreakOff() { r.Broken = true }

// AbortIfBroken ends a handler whose answer broke off: net/http then
// aborts the connection (or resets the HTTP/2 stream), so the client sees
// a broken transfer.
func (r *Recorder) AbortIfBroken() {
	if r.Broken {
		panic(http.ErrAbortHandler)
	}
}

func (r *Recorder) WriteHeader(code int) {
	if r.Broken {
		return
	}
	if !r.wrote && code >= 200 {
		r.Status, r.wrote = code, true
		h := r.ResponseWriter.Header()
		for _, f := range r.Strip {
			delete(h, f)
		}
		if r.ID != nil {
			h["X-Request-Id"] = r.ID
		}
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *Recorder) Write(b []byte) (int, error) {
	if r.Broken {
		return 0, ErrBrokenOff
	}
	if !r.wrote {
		r.WriteHeader(http.StatusOK)
	}
	n, err := r.ResponseWriter.Write(b)
	r.Bytes += int64(n)
	return n, err
}

// ReadFrom passes the real writer's ReadFrom on, so that a body read from
// a file goes out by sendfile.
func (r *Recorder) ReadFrom(src io.Reader) (int64, error) {
	if r.Broken {
		return 0, ErrBrokenOff
	}
	if !r.wrote {
		r.WriteHeader(http.StatusOK)
	}
	n, err := Copy(r.ResponseWriter, src)
	r.Bytes += n
	return n, err
}

// Answerer is a writer that takes a whole answer with its header fields
// already serialised (head: field lines, each ending in CRLF), its length
// from body: the client port's server. Answer reports false, having
// written nothing, when the answer has begun.
type Answerer interface {
	Answer(status int, head, body []byte) bool
}

// TakesWhole reports whether w takes a whole answer now: it is an
// Answerer, or a Recorder over one whose answer has not begun.
func TakesWhole(w http.ResponseWriter) bool {
	if r, ok := w.(*Recorder); ok {
		_, ok = r.ResponseWriter.(Answerer)
		return ok && !r.wrote && !r.Broken
	}
	_, ok := w.(Answerer)
	return ok
}

// Answer passes a whole answer to the writer below when it is an
// Answerer, recording it as WriteHeader and Write would; head must hold
// none of the fields to Strip (a written head cannot lose them), and
// holds the X-Request-Id of ID when it is set (see RequestID). It
// reports false, having written nothing, when the writer is none, or the
// answer has begun or broken off.
func (r *Recorder) Answer(status int, head, body []byte) bool {
	a, ok := r.ResponseWriter.(Answerer)
	if !ok || r.wrote || r.Broken || status < 200 {
		return false
	}
	for _, f := range r.Strip {
		delete(r.ResponseWriter.Header(), f)
	}
	if !a.Answer(status, head, body) {
		return false
	}
	r.Status, r.wrote = status, true
	r.Bytes += int64(len(body))
	return true
}

// RequestID is the X-Request-Id that w's answer carries (a Recorder's
// ID), and whether it has one: a stored one is then not sent.
func RequestID(w http.ResponseWriter) (string, bool) {
	if r, ok := w.(*Recorder); ok && len(r.ID) == 1 {
		return r.ID[0], true
	}
	return "", false
}

// Unwrap lets http.ResponseController reach the real writer.
func (r *Recorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

// PassInterim passes 1xx interim responses from the origin (103 Early
// Hints, 100 Continue aside) on to w.
func PassInterim(w http.ResponseWriter) *httptrace.ClientTrace {
	return &httptrace.ClientTrace{Got1xxResponse: func(code int, h textproto.MIMEHeader) error {
		if code == http.StatusContinue || code == http.StatusSwitchingProtocols {
			return nil
		}
		hdr := w.Header()
		for k, v := range h {
			hdr[k] = v
		}
		w.WriteHeader(code)
		for k := range h {
			hdr.Del(k)
		}
		return nil
	}}
}
