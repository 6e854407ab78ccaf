package h1

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// A handler's goroutine that outlives it (a transport still sending the
// request's body on, a timer) and then touches the answer it was given
// writes into nothing: not into the answer of the connection's next
// request, which may be another client's behind a proxy that pools
// connections to the node.
func TestAWriteAfterTheHandlerReturnedReachesNoOtherAnswer(t *testing.T) {
	late := make(chan struct{})  // the first request's goroutine may go on
	wrote := make(chan error, 1) // and has written what it could
	addr, _ := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/first":
			h := w.Header()
			go func() {
				<-late
				h.Set("X-Leak", "map")
				w.Header().Set("X-Leak-Header", "1")
				_, err := io.WriteString(w, "LATE")
				w.(http.Flusher).Flush()
				big := make([]byte, MaxBuffered)
				for i := range big {
					big[i] = 'L'
				}
				w.Write(big)
				wrote <- err
			}()
			io.WriteString(w, "first")
		case "/second":
			close(late)
			if err := <-wrote; err == nil {
				t.Errorf("a write after the handler returned: no error")
			}
			io.WriteString(w, "second")
		}
	}))
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	br := bufio.NewReader(c)
	for _, want := range []string{"first", "second"} {
		io.WriteString(c, "GET /"+want+" HTTP/1.1\r\nHost: x\r\n\r\n")
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("answer %s: %v", want, err)
		}
		b, err := io.ReadAll(resp.Body)
		if err != nil || string(b) != want || resp.Header.Get("X-Leak") != "" || resp.Header.Get("X-Leak-Header") != "" {
			t.Fatalf("answer %s: %d bytes %.40q (%v), X-Leak %q %q: want %q alone", want, len(b), b, err,
				resp.Header.Get("X-Leak"), resp.Header.Get("X-Leak-Header"), want)
		}
	}
	// Nothing follows on the connection: a third answer is the third's.
	io.WriteString(c, "GET /third HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("answer third: %v", err)
	}
	resp.Body.Close()
}

// A call made while another of the same answer is under way is not held
// by it: a body copied into the answer whose reads renew the connection's
// read deadline, as the front's request body does, goes through.
func TestACallInsideAnotherIsNotHeld(t *testing.T) {
	addr, _ := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rc := http.NewResponseController(w)
		w.(io.ReaderFrom).ReadFrom(readerFunc(func(p []byte) (int, error) {
			if err := rc.SetReadDeadline(time.Now().Add(time.Minute)); err != nil {
				return 0, err
			}
			return r.Body.Read(p)
		}))
	}))
	got := exchange(t, addr, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello")
	if !strings.HasSuffix(got, "5\r\nhello\r\n0\r\n\r\n") {
		t.Fatalf("answer %q, want the body copied back", got)
	}
}

type readerFunc func([]byte) (int, error)

func (f readerFunc) Read(p []byte) (int, error) { return f(p) }

// A goroutine of the handler's that copies a stream into the answer, the
// stream ending with the request's context (an upstream request made
// with it), is ended by the handler's return: its request's context is
// cancelled, and its copy returns. The connection's goroutine waited for
// the copy to return before it cancelled the context, which was all that
// could end it: the answer never came, and the connection hung.
func TestAStreamEndingWithTheRequestEndsWithTheHandler(t *testing.T) {
	addr, _ := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		copying := make(chan struct{})
		go w.(io.ReaderFrom).ReadFrom(readerFunc(func(p []byte) (int, error) {
			select {
			case <-copying:
			default:
				close(copying)
			}
			<-r.Context().Done() // an upstream body read with the request's context
			return 0, r.Context().Err()
		}))
		<-copying
		// The handler gives up on the stream (a timeout of its own) and
		// returns.
	}))
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
	if _, err := http.ReadResponse(bufio.NewReader(c), nil); err != nil {
		t.Fatalf("no answer once the handler returned: %v", err)
	}
}
