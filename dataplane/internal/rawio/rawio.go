// Package rawio reads and writes TCP connections with system calls the Go
// scheduler does not watch.
//
// A socket read or write through package net enters the runtime's
// system-call state, as a read of a file does. On a node with one P under
// load, a call that spans one of sysmon's ticks (20 µs: a 16 KiB write on
// loopback does) has its P taken and handed to another thread, and sysmon
// then keeps ticking every 20 µs instead of backing off to 10 ms. Measured
// on a node under S2's load, sysmon alone was 14 % of the node's CPU, and
// the hand-offs cost futex wake-ups on top. A socket of package net is
// non-blocking, so its read or write never waits in the kernel: it returns
// EAGAIN instead, and a raw system call (no scheduler bookkeeping, as
// runtime-internal calls are made) is safe. Waiting for readiness and
// deadlines stay package net's, through syscall.RawConn.
//
// Files, whose reads can wait on a disk, keep package os's calls.
package rawio

import (
	"context"
	"io"
	"net"
	"os"
	"sync"
	"syscall"
	"unsafe"
)

// Conn is a TCP connection whose Read and Write are raw system calls. Its
// other methods, sendfile through ReadFrom among them, are net.TCPConn's.
// Like a net.Conn it may be used from many goroutines at once; each Write
// goes out whole, not interleaved with another.
type Conn struct {
	*net.TCPConn
	// r and w are the two directions; their funcs are made once, so a
	// call allocates nothing.
	r, w call
}

// call is one direction: the system call in progress, mu holding it for
// one Read or Write at a time, and the RawConn method that runs it.
type call struct {
	name  string // of the system call, and of the operation in its errors
	mu    sync.Mutex
	p     []byte
	n     int
	errno syscall.Errno
	fn    func(fd uintptr) bool             // read or write
	wait  func(func(fd uintptr) bool) error // RawConn.Read or RawConn.Write
}

// Wrap returns c as a Conn when it is a TCP connection, c itself otherwise.
func Wrap(c net.Conn) net.Conn {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return c
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return c
	}
	rw := &Conn{TCPConn: tc}
	rw.r = call{name: "read", wait: rc.Read}
	rw.w = call{name: "write", wait: rc.Write}
	rw.r.fn, rw.w.fn = rw.r.read, rw.w.write
	return rw
}

// NetConn returns the connection underneath.
func (c *Conn) NetConn() net.Conn { return c.TCPConn }

// Read reads into p with read(2).
func (c *Conn) Read(p []byte) (int, error) {
	n, err := c.r.do(p)
	if err != nil {
		return 0, c.opError(c.r.name, err)
	}
	if n == 0 && len(p) > 0 {
		return 0, io.EOF
	}
	return n, nil
}

// Write writes all of p with write(2), waiting for room as package net does.
func (c *Conn) Write(p []byte) (int, error) {
	n, err := c.w.do(p)
	if err != nil {
		return n, c.opError(c.w.name, err)
	}
	return n, nil
}

// do runs the call on p: bytes moved, and why it stopped short.
func (c *call) do(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.p, c.n, c.errno = p, 0, 0
	err := c.wait(c.fn)
	c.p = nil
	if err == nil && c.errno != 0 {
		err = os.NewSyscallError(c.name, c.errno)
	}
	return c.n, err
}

// read is a RawConn.Read func: false to wait until the socket is readable.
func (r *call) read(fd uintptr) bool {
	for {
		n, _, e := syscall.RawSyscall(syscall.SYS_READ, fd, uintptr(unsafe.Pointer(&r.p[0])), uintptr(len(r.p)))
		switch e {
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
			return false
		}
		if e == 0 {
			r.n = int(n)
		}
		r.errno = e
		return true
	}
}

// write is a RawConn.Write func: false to wait until the socket has room.
func (w *call) write(fd uintptr) bool {
	for w.n < len(w.p) {
		n, _, e := syscall.RawSyscall(syscall.SYS_WRITE, fd, uintptr(unsafe.Pointer(&w.p[w.n])), uintptr(len(w.p)-w.n))
		switch e {
		case 0:
			w.n += int(n)
		case syscall.EINTR:
		case syscall.EAGAIN:
			return false
		default:
			w.errno = e
			return true
		}
	}
	return true
}

// opError wraps err as package net's connections do, so that callers that
// look for a net.Error (a timeout) or an errno find them.
func (c *Conn) opError(op string, err error) error {
	return &net.OpError{Op: op, Net: "tcp", Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: err}
}

// Listener wraps every connection it accepts (Wrap).
type Listener struct{ net.Listener }

// Accept returns the next connection, wrapped.
func (l Listener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return Wrap(c), nil
}

// Dial is d's DialContext with every connection it returns wrapped.
func Dial(d *net.Dialer) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return Wrap(c), nil
	}
}
