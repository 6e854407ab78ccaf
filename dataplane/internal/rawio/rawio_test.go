package rawio_test

import (
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/shardcache/shardcache/dataplane/internal/rawio"
	"github.com/shardcache/shardcache/dataplane/internal/rawio/rawiotest"
)

// A body far larger than the socket buffers crosses whole both ways: the
// writer waits for room (EAGAIN) and goes on where it stopped, the reader
// waits for bytes.
func TestLargeWritesAndReadsCrossWhole(t *testing.T) {
	a, b := rawiotest.Pair(t)
	want := make([]byte, 32<<20)
	for i := range want {
		want[i] = byte(rand.Uint32())
	}
	for _, dir := range []struct {
		name string
		w    net.Conn
		r    net.Conn
	}{{"raw writer", a, b}, {"raw reader", b, a}} {
		got := make(chan []byte)
		go func() {
			var buf bytes.Buffer
			chunk := make([]byte, 1000) // small reads, so the writer fills the buffers
			for buf.Len() < len(want) {
				n, err := dir.r.Read(chunk)
				buf.Write(chunk[:n])
				if err != nil {
					break
				}
			}
			got <- buf.Bytes()
		}()
		n, err := dir.w.Write(want)
		if err != nil || n != len(want) {
			t.Fatalf("%s: wrote %d of %d: %v", dir.name, n, len(want), err)
		}
		if g := <-got; !bytes.Equal(g, want) {
			t.Fatalf("%s: read %d bytes, not what was written", dir.name, len(g))
		}
	}
}

// Deadlines are package net's: a read past its deadline and a write to a
// peer that reads nothing end with a timeout, the write saying how much
// went out: exactly what the peer then reads.
func TestDeadlinesEndWaits(t *testing.T) {
	a, b := rawiotest.Pair(t)
	a.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	n, err := a.Read(make([]byte, 10))
	var ne net.Error
	if n != 0 || !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("a read past its deadline returned %d, %v; want a timeout", n, err)
	}
	a.SetWriteDeadline(time.Now().Add(200 * time.Millisecond))
	n, err = a.Write(make([]byte, 64<<20)) // more than the sockets' buffers hold
	if !errors.As(err, &ne) || !ne.Timeout() || n >= 64<<20 {
		t.Fatalf("a write to a peer reading nothing returned %d, %v; want a timeout before the end", n, err)
	}
	a.Close()
	if got, err := io.Copy(io.Discard, b); got != int64(n) || err != nil {
		t.Fatalf("the write said %d bytes went out; the peer read %d (%v)", n, got, err)
	}
}

// The peer's close reads as io.EOF, its reset as ECONNRESET, and a close of
// the connection itself ends a read waiting on it with net.ErrClosed.
func TestEndsReadAsPackageNetsDo(t *testing.T) {
	a, b := rawiotest.Pair(t)
	b.Write([]byte("last"))
	b.Close()
	got, err := io.ReadAll(a)
	if string(got) != "last" || err != nil {
		t.Fatalf("read %q, %v to the peer's close; want \"last\" then io.EOF", got, err)
	}

	a, b = rawiotest.Pair(t)
	b.(*net.TCPConn).SetLinger(0)
	b.Close()
	a.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := a.Read(make([]byte, 10)); !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("a read after the peer's reset returned %v; want ECONNRESET", err)
	}

	a, _ = rawiotest.Pair(t)
	done := make(chan error)
	go func() { _, err := a.Read(make([]byte, 10)); done <- err }()
	a.Close() // whether the read waits already or starts after, it ends

	select {
	case err := <-done:
		if !errors.Is(err, net.ErrClosed) {
			t.Fatalf("a read ended by Close returned %v; want net.ErrClosed", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not end a waiting read")
	}
}

// Writes from many goroutines at once each go out whole.
func TestConcurrentWritesDoNotInterleave(t *testing.T) {
	a, b := rawiotest.Pair(t)
	const writers, size = 8, 1 << 20 // each larger than the socket buffers
	for i := range writers {
		go a.Write(bytes.Repeat([]byte{byte('a' + i)}, size))
	}
	got := make([]byte, writers*size)
	if _, err := io.ReadFull(b, got); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < len(got); i += size {
		if run := got[i : i+size]; bytes.Count(run, run[:1]) != size {
			t.Fatalf("the write at %d is interleaved with another", i)
		}
	}
}

// A read and a write allocate nothing.
func TestReadAndWriteDoNotAllocate(t *testing.T) {
	a, b := rawiotest.Pair(t)
	p, q := make([]byte, 512), make([]byte, 512)
	if n := testing.AllocsPerRun(100, func() {
		a.Write(p)
		io.ReadFull(b, q)
		b.Write(q)
		io.ReadFull(a, p)
	}); n != 0 {
		t.Fatalf("%v allocations a write and read", n)
	}
}

// What is not TCP is returned as it is.
func TestWrapLeavesOtherConnections(t *testing.T) {
	p, q := net.Pipe()
	defer p.Close()
	defer q.Close()
	if rawio.Wrap(p) != p {
		t.Fatal("a pipe was wrapped")
	}
}
