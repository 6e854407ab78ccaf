package clientconn

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/shardcache/shardcache/dataplane/internal/rawio"
	"github.com/shardcache/shardcache/dataplane/internal/rawio/rawiotest"
)

// serve runs an HTTP server on a Listener with cfg over raw connections, as
// a node does; h gets every request.
func serve(t *testing.T, cfg Config, h http.HandlerFunc) *Listener {
	t.Helper()
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := NewListener(rawio.Listener{Listener: raw}, cfg)
	srv := &http.Server{Handler: h, ConnContext: ConnContext, ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	return l
}

// A client that stops reading is cut once no byte is taken for the write
// timeout; one that keeps reading, slowly, gets a body that takes many
// times the timeout.
func TestAClientThatStopsReadingIsCut(t *testing.T) {
	const body = 64 << 20 // far more than the socket buffers hold
	written := make(chan error, 1)
	l := serve(t, Config{WriteTimeout: 300 * time.Millisecond}, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "67108864")
		chunk := make([]byte, 1<<20)
		var err error
		for i := 0; i < body/len(chunk) && err == nil; i++ {
			_, err = w.Write(chunk)
		}
		written <- err
	})
	c, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	select {
	case err := <-written:
		if err == nil {
			t.Fatal("the whole body was written to a client that read nothing")
		}
	case <-time.After(30 * time.Second):
		t.Fatal("a client that reads nothing held its connection for 30 s")
	}

	// A slow reader that keeps taking bytes is never cut.
	c2, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	io.WriteString(c2, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	start := time.Now()
	br := bufio.NewReader(c2)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4<<20)
	var got int64
	for {
		n, err := resp.Body.Read(buf)
		got += int64(n)
		if err != nil {
			break
		}
		time.Sleep(20 * time.Millisecond) // a slow reader, taking 4 MiB every 20 ms at most
	}
	if got != body {
		t.Fatalf("a slow reader got %d of %d bytes in %s", got, body, time.Since(start))
	}
	if err := <-written; err != nil {
		t.Fatalf("writing to a slow reader: %v", err)
	}
}

// A file sent by sendfile renews the deadline per chunk: a transfer
// longer than the timeout completes.
func TestReadFromSendsAFileInChunks(t *testing.T) {
	p := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(p, make([]byte, 3*sendChunk+5), 0o644); err != nil {
		t.Fatal(err)
	}
	a, b := rawiotest.Pair(t)
	c := &Conn{Conn: a, l: &Listener{cfg: Config{WriteTimeout: time.Minute}}}
	f, _ := os.Open(p)
	defer f.Close()
	done := make(chan int64)
	go func() { n, _ := io.Copy(io.Discard, b); done <- n }()
	n, err := c.ReadFrom(&io.LimitedReader{R: f, N: 3*sendChunk + 5})
	a.Close()
	if err != nil || n != 3*sendChunk+5 || <-done != n {
		t.Fatalf("ReadFrom sent %d (%v)", n, err)
	}
}

// storedBody is a file as the store hands one out: a descriptor behind a
// type of its own, not an *os.File. It counts the reads made through it.
type storedBody struct {
	f     *os.File
	reads int
}

func (b *storedBody) Read(p []byte) (int, error) { b.reads++; return b.f.Read(p) }

func (b *storedBody) SyscallConn() (syscall.RawConn, error) { return b.f.SyscallConn() }

// Any descriptor that is not a connection goes out by sendfile, not
// through its Read: the store's bodies are not *os.File.
func TestReadFromSendsAStoredBodyBySendfile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "f")
	want := bytes.Repeat([]byte("stored "), 100000)
	if err := os.WriteFile(p, want, 0o644); err != nil {
		t.Fatal(err)
	}
	a, b := rawiotest.Pair(t)
	c := &Conn{Conn: a, l: &Listener{cfg: Config{WriteTimeout: time.Minute}}}
	f, _ := os.Open(p)
	defer f.Close()
	body := &storedBody{f: f}
	done := make(chan []byte)
	go func() { got, _ := io.ReadAll(b); done <- got }()
	n, err := c.ReadFrom(&io.LimitedReader{R: body, N: int64(len(want))})
	a.Close()
	if got := <-done; err != nil || n != int64(len(want)) || !bytes.Equal(got, want) {
		t.Fatalf("ReadFrom sent %d of %d (%v), equal %v", n, len(want), err, bytes.Equal(got, want))
	}
	if body.reads != 0 {
		t.Fatalf("the body was read %d times through Read, not sent by sendfile", body.reads)
	}
}

// One address holds at most MaxPerAddr connections: the next is told 503
// and closed, and once one closes a new one is taken. An exempt address
// is not bounded.
func TestConnectionsPerAddressAreBounded(t *testing.T) {
	var refused atomic.Int32
	var exempt atomic.Bool
	l := serve(t, Config{MaxPerAddr: 2, OnRefused: func() { refused.Add(1) }, Exempt: func(netip.Addr) bool { return exempt.Load() }},
		func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
	open := func() net.Conn {
		c, err := net.Dial("tcp", l.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	get := func(c net.Conn) string {
		c.SetDeadline(time.Now().Add(5 * time.Second))
		io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			return err.Error()
		}
		b, _ := io.ReadAll(resp.Body)
		return resp.Status + " " + string(b)
	}
	first, second := open(), open()
	if got := get(first); got != "200 OK ok" {
		t.Fatal(got)
	}
	if got := get(second); got != "200 OK ok" {
		t.Fatal(got)
	}
	third := open()
	third.SetDeadline(time.Now().Add(5 * time.Second))
	b, _ := io.ReadAll(third)
	if !strings.HasPrefix(string(b), "HTTP/1.1 503") || !strings.Contains(string(b), "too many connections") || refused.Load() != 1 {
		t.Fatalf("the third connection got %q (%d refused); want 503, then closed", b, refused.Load())
	}
	first.Close()
	loop := netip.MustParseAddr("127.0.0.1")
	for deadline := time.Now().Add(10 * time.Second); l.Open(loop) >= 2; { // the server closes its side once it reads the close
		if time.Now().After(deadline) {
			t.Fatal("the closed connection is still counted")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if got := get(open()); got != "200 OK ok" {
		t.Fatalf("after one closed: %s", got)
	}
	exempt.Store(true)
	if got := get(open()); got != "200 OK ok" {
		t.Fatalf("an exempt address was bounded: %s", got)
	}
}

func TestResetEndsWithARST(t *testing.T) {
	a, b := rawiotest.Pair(t)
	c := &Conn{Conn: a, l: &Listener{}}
	io.WriteString(c, "partial")
	c.Reset()
	c.Close()
	b.SetDeadline(time.Now().Add(5 * time.Second))
	_, err := io.ReadAll(b)
	if !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("the peer read to %v; want a connection reset", err)
	}
}
