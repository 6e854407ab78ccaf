package coalesce

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// countingListener counts the writes made to its connections' sockets.
type countingListener struct {
	net.Listener
	writes *atomic.Int64
}

func (l countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &countingConn{TCPConn: c.(*net.TCPConn), writes: l.writes}, nil
}

type countingConn struct {
	*net.TCPConn
	writes *atomic.Int64
}

func (c *countingConn) Write(p []byte) (int, error) {
	c.writes.Add(1)
	return c.TCPConn.Write(p)
}

// serve runs h on a coalescing listener and returns its address and the
// socket write count.
func serve(t *testing.T, h http.HandlerFunc) (string, *atomic.Int64) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	writes := new(atomic.Int64)
	s := &http.Server{Handler: h, ConnContext: ConnContext}
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.Serve(Listener{countingListener{l, writes}})
	}()
	t.Cleanup(func() {
		s.Close()
		<-done
	})
	return l.Addr().String(), writes
}

// get sends n keep-alive GETs on one connection and returns the bodies.
func get(t *testing.T, addr string, n int) [][]byte {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	br := bufio.NewReader(c)
	var bodies [][]byte
	for range n {
		if _, err := io.WriteString(c, "GET /x HTTP/1.1\r\nHost: a\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		bodies = append(bodies, b)
	}
	return bodies
}

func body(n int) []byte { return bytes.Repeat([]byte("0123456789abcdef"), n/16) }

func TestAHeldAnswerLeavesInOneWrite(t *testing.T) {
	for _, size := range []int{4 << 10, 16 << 10, 48 << 10} {
		b := body(size)
		for _, hold := range []bool{false, true} {
			addr, writes := serve(t, func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Length", strconv.Itoa(len(b)))
				w.Header().Set("X-Cache", "HIT")
				if hold && !Hold(r, int64(len(b))) {
					t.Error("Hold refused an HTTP/1.1 request on a Conn")
				}
				w.Write(b)
				Settle(w, r)
			})
			for i, got := range get(t, addr, 3) {
				if !bytes.Equal(got, b) {
					t.Fatalf("size %d hold %v: answer %d has %d bytes, want %d", size, hold, i, len(got), len(b))
				}
			}
			perAnswer := float64(writes.Load()) / 3
			switch {
			case hold && perAnswer != 1:
				t.Errorf("size %d: held answers took %.1f writes each, want 1", size, perAnswer)
			case !hold && perAnswer < 2:
				t.Errorf("size %d: without holding, %.1f writes each; the test no longer shows what holding saves", size, perAnswer)
			}
		}
	}
}

func TestAHeldAnswerWaitsForSettle(t *testing.T) {
	b := body(4 << 10)
	written := make(chan struct{})
	settle := make(chan struct{})
	addr, writes := serve(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", strconv.Itoa(len(b)))
		if !Hold(r, int64(len(b))) {
			t.Error("Hold refused")
		}
		if Hold(r, 1) {
			t.Error("a second Hold on a holding connection was taken")
		}
		w.Write(b)
		close(written)
		<-settle
		Settle(w, r)
	})
	got := make(chan [][]byte)
	go func() { got <- get(t, addr, 1) }()
	<-written
	if n := writes.Load(); n != 0 {
		t.Errorf("%d writes before Settle; a held answer must wait for it", n)
	}
	close(settle)
	if b2 := <-got; !bytes.Equal(b2[0], b) {
		t.Fatalf("%d bytes", len(b2[0]))
	}
}

func TestHoldIsBounded(t *testing.T) {
	b := body(MaxHeld)
	addr, _ := serve(t, func(w http.ResponseWriter, r *http.Request) {
		if Hold(r, int64(len(b))) {
			t.Errorf("Hold took a %d-byte answer, more than it may hold", len(b))
		}
		if Hold(r, -1) {
			t.Error("Hold took an answer of unknown length")
		}
		if !Hold(r, 1024) {
			t.Error("Hold refused a small answer")
		}
		// Told 1 KiB, written 64 KiB: what passes the bound goes out
		// rather than growing the held buffer.
		w.Header().Set("Content-Length", strconv.Itoa(len(b)))
		w.Write(b)
		c := r.Context().Value(ctxKey{}).(*Conn)
		c.mu.Lock()
		if c.held != nil && len(*c.held) > MaxHeld {
			t.Errorf("held %d bytes, over the %d bound", len(*c.held), MaxHeld)
		}
		c.mu.Unlock()
		Settle(w, r)
	})
	if got := get(t, addr, 2); !bytes.Equal(got[1], b) {
		t.Fatalf("%d bytes", len(got[1]))
	}
}

func TestAFileBodyStillGoesOutByReadFrom(t *testing.T) {
	b := body(256 << 10)
	p := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
	addr, writes := serve(t, func(w http.ResponseWriter, r *http.Request) {
		f, err := os.Open(p)
		if err != nil {
			t.Error(err)
			return
		}
		defer f.Close()
		w.Header().Set("Content-Length", strconv.Itoa(len(b)))
		io.Copy(w, f)
	})
	if got := get(t, addr, 1); !bytes.Equal(got[0], b) {
		t.Fatalf("%d bytes", len(got[0]))
	}
	// By sendfile (the socket's ReadFrom) the body bypasses Write: a
	// handful of writes (the header), not one per 32 KiB copy.
	if n := writes.Load(); n > 2 {
		t.Errorf("%d writes for a 256 KiB file body: ReadFrom did not reach the socket", n)
	}
}
