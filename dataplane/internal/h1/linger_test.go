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

// A refused head with more of it still on its way: the client, still
// writing, reads the whole answer and its end, not a reset.
func TestARefusalIsReadWholeByAClientStillSending(t *testing.T) {
	addr, _ := serve(t, hello)
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	// A small send buffer: the head cannot all be on its way when the
	// server refuses it; the write ends only if the server reads on.
	c.(*net.TCPConn).SetWriteBuffer(16 << 10)
	wrote := make(chan error, 1)
	go func() { // far more than the 64 KiB the server reads before refusing
		_, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\nX-Big: "+strings.Repeat("a", 768<<10))
		wrote <- err
	}()
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("reading the answer: %v", err)
	}
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge || int64(len(body)) != resp.ContentLength {
		t.Fatalf("answer %d with %d of %d bytes (%v), want a whole 431", resp.StatusCode, len(body), resp.ContentLength, err)
	}
	if err := <-wrote; err != nil {
		t.Fatalf("the rest of the head was not taken: %v", err)
	}
}

// A client that goes on sending after a refusal is closed once the server
// has dropped lingerBytes; one that sends nothing more and keeps its side
// open, once lingerTime has passed.
func TestALingeringCloseIsBounded(t *testing.T) {
	addr, s := serve(t, hello)
	refused := func() net.Conn {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		c.SetDeadline(time.Now().Add(20 * time.Second))
		if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\nX-Big: "+strings.Repeat("a", 100<<10)); err != nil {
			t.Fatal(err)
		}
		if got, _ := io.ReadAll(c); !strings.HasPrefix(string(got), "HTTP/1.1 431 ") {
			t.Fatalf("answer %q, want 431", firstLine(string(got)))
		}
		return c
	}
	endless := refused()
	chunk := []byte(strings.Repeat("a", 64<<10))
	var sent int64
	for {
		n, err := endless.Write(chunk)
		sent += int64(n)
		if err != nil {
			break // the server closed
		}
		if sent > 64*lingerBytes {
			t.Fatalf("%d bytes taken after the refusal, want the close after %d", sent, lingerBytes)
		}
	}
	refused() // and leaves its side open, silent
	deadline := time.Now().Add(10 * lingerTime)
	for {
		s.mu.Lock()
		left := len(s.conns)
		s.mu.Unlock()
		if left == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d connections still open %v after their refusals", left, 10*lingerTime)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
