package h1

import (
	"errors"
	"io"
	"net/http"
	"time"
)

// errEnded is what a handler's goroutine gets for writing an answer
// whose handler has returned.
var errEnded = errors.New("h1: the answer was written after its handler returned")

// answer is the http.ResponseWriter a handler is given: the connection's
// response for the one request it serves. The response is reused request
// after request, so a goroutine of the handler's that outlives it (a
// transport still sending the request's body on, a timer) would write
// into the connection's next answer, which may be another client's behind
// a proxy that pools connections. Once the handler has returned, the
// response moves to its next generation (end), and an answer of an
// earlier one writes nothing, sets nothing, and fails.
//
// A call is not held against the others of its generation (a transport's
// goroutine may set the read deadline while the handler's writes, as
// before), and a call made from inside another (a body read while the
// answer copies it) is not held at all: end waits for the calls under way
// to return, and a call that starts once it has begun fails at once.
type answer struct {
	w   *response
	gen uint64
}

// enter begins a call of a, or reports false when a's handler has
// returned; exit ends it.
func (a *answer) enter() bool {
	w := a.w
	w.live.Lock()
	defer w.live.Unlock()
	if a.gen != w.gen {
		return false
	}
	w.calls++
	return true
}

func (a *answer) exit() {
	w := a.w
	w.live.Lock()
	defer w.live.Unlock()
	if w.calls--; w.calls == 0 && w.ending {
		w.idle.Broadcast()
	}
}

// end ends the current answer's generation once its handler returned:
// the calls under way return, and the answers handed out for it write
// nothing more.
func (w *response) end() {
	w.live.Lock()
	defer w.live.Unlock()
	w.gen++
	if w.idle.L == nil {
		w.idle.L = &w.live
	}
	w.ending = true
	for w.calls > 0 {
		w.idle.Wait()
	}
	w.ending = false
}

// Header is the answer's header; once the handler has returned, a map of
// its own that nothing reads.
func (a *answer) Header() http.Header {
	if !a.enter() {
		return http.Header{}
	}
	defer a.exit()
	return a.w.Header()
}

func (a *answer) WriteHeader(code int) {
	if !a.enter() {
		return
	}
	defer a.exit()
	a.w.WriteHeader(code)
}

func (a *answer) Write(p []byte) (int, error) {
	if !a.enter() {
		return 0, errEnded
	}
	defer a.exit()
	return a.w.Write(p)
}

// Answer is response.Answer.
func (a *answer) Answer(status int, head, body []byte) bool {
	if !a.enter() {
		return false
	}
	defer a.exit()
	return a.w.Answer(status, head, body)
}

// Arrived is response.Arrived.
func (a *answer) Arrived() time.Time {
	if !a.enter() {
		return time.Time{}
	}
	defer a.exit()
	return a.w.Arrived()
}

func (a *answer) ReadFrom(src io.Reader) (int64, error) {
	if !a.enter() {
		return 0, errEnded
	}
	defer a.exit()
	return a.w.ReadFrom(src)
}

func (a *answer) Flush() { a.FlushError() }

func (a *answer) FlushError() error {
	if !a.enter() {
		return errEnded
	}
	defer a.exit()
	return a.w.FlushError()
}

// SetReadDeadline and SetWriteDeadline are http.ResponseController's:
// once the handler has returned, the connection's deadlines are the next
// request's.
func (a *answer) SetReadDeadline(t time.Time) error {
	if !a.enter() {
		return errEnded
	}
	defer a.exit()
	return a.w.SetReadDeadline(t)
}

func (a *answer) SetWriteDeadline(t time.Time) error {
	if !a.enter() {
		return errEnded
	}
	defer a.exit()
	return a.w.SetWriteDeadline(t)
}
