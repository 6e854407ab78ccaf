package relay

import (
	"bytes"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"os"
	"sync/atomic"
	"testing"
	"time"
)

// countingListener counts the writes of the connections it accepts.
type countingListener struct {
	net.Listener
	writes atomic.Int64
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &countingConn{Conn: c, writes: &l.writes}, nil
}

type countingConn struct {
	net.Conn
	writes *atomic.Int64
}

func (c *countingConn) Write(p []byte) (int, error) {
	c.writes.Add(1)
	return c.Conn.Write(p)
}

// splitPair listens for member "owner" through SplitTLS and returns the
// two class listeners, the raw listener's write count and a client
// configuration of member "relay".
func splitPair(t *testing.T, handshake time.Duration) (h2, h1 net.Listener, raw *countingListener, client *tls.Config) {
	t.Helper()
	ca := newTestCA(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	raw = &countingListener{Listener: l}
	h2, h1 = SplitTLS(raw, ServerTLS(ca.issue(t, "owner")), handshake)
	t.Cleanup(func() { h1.Close() })
	client = ca.issue(t, "relay")
	client.ServerName = "owner"
	return h2, h1, raw, client
}

func dialPeer(t *testing.T, addr net.Addr, conf *tls.Config, protos ...string) *tls.Conn {
	t.Helper()
	conf = conf.Clone()
	conf.NextProtos = protos
	c, err := tls.Dial("tcp", addr.String(), conf)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func accept(t *testing.T, l net.Listener) net.Conn {
	t.Helper()
	c, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// A connection that negotiated HTTP/2 goes to the HTTP/2 listener as the
// TLS connection it is; one that asked for HTTP/1.1, or for nothing, to
// the HTTP/1.1 listener as a BulkConn, its TLS state known.
func TestSplitTLSHandsEachClassItsConnections(t *testing.T) {
	h2, h1, _, client := splitPair(t, 10*time.Second)
	for _, tc := range []struct {
		protos []string
		to     net.Listener
		bulk   bool
	}{{[]string{"h2"}, h2, false}, {[]string{"http/1.1"}, h1, true}, {nil, h1, true}} {
		dialPeer(t, h1.Addr(), client, tc.protos...)
		c := accept(t, tc.to)
		_, isBulk := c.(*BulkConn)
		st := c.(interface{ ConnectionState() tls.ConnectionState }).ConnectionState()
		if isBulk != tc.bulk || !st.HandshakeComplete || len(st.PeerCertificates) == 0 || Identity(st.PeerCertificates[0]) != "relay" {
			t.Fatalf("offering %q: a %T (bulk %v), handshake complete %v, %d peer certificates; want bulk %v and member relay",
				tc.protos, c, isBulk, st.HandshakeComplete, len(st.PeerCertificates), tc.bulk)
		}
	}
}

// A caller that opens a connection and never completes its handshake is
// cut off once the handshake bound passes, and holds up no other caller.
func TestSplitTLSBoundsAHandshake(t *testing.T) {
	_, h1, _, client := splitPair(t, 200*time.Millisecond)
	silent, err := net.Dial("tcp", h1.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	dialPeer(t, h1.Addr(), client, "http/1.1") // served while the silent one waits
	accept(t, h1)
	silent.SetReadDeadline(time.Now().Add(time.Minute)) // a guard against a hang, not a measure
	if n, err := silent.Read(make([]byte, 1)); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("a silent caller was not cut off: read %d, %v", n, err)
	}
}

// Closing one class listener closes the split: both Accepts end.
func TestSplitTLSClosesBothListeners(t *testing.T) {
	h2, h1, _, _ := splitPair(t, time.Second)
	h2.Close()
	for _, l := range []net.Listener{h2, h1} {
		if c, err := l.Accept(); err == nil {
			c.Close()
			t.Fatal("a listener of a closed split accepted a connection")
		}
	}
}

// A BulkConn sends the records of one Write together, and every byte of
// it before Write returns: a body of a whole number of full records (the
// last record then gives no sign that the Write has ended) arrives whole
// without a later write to push it out.
func TestBulkConnSendsAWriteInFewSystemCalls(t *testing.T) {
	_, h1, raw, client := splitPair(t, 10*time.Second)
	c := dialPeer(t, h1.Addr(), client, "http/1.1")
	s := accept(t, h1)
	for _, size := range []int{4 << 20, 64 << 10, 300, gatherMax} {
		body := bytes.Repeat([]byte{byte(size)}, size)
		before := raw.writes.Load()
		wrote := make(chan error, 1)
		go func() {
			n, err := s.Write(body)
			if err == nil && n != size {
				err = io.ErrShortWrite
			}
			wrote <- err
		}()
		c.SetReadDeadline(time.Now().Add(time.Minute)) // a guard against a hang, not a measure
		got := make([]byte, size)
		if _, err := io.ReadFull(c, got); err != nil || !bytes.Equal(got, body) {
			t.Fatalf("reading the %d bytes written: %v (equal %v)", size, err, bytes.Equal(got, body))
		}
		if err := <-wrote; err != nil {
			t.Fatalf("Write of %d bytes: %v", size, err)
		}
		writes := raw.writes.Load() - before
		records := (size + 16<<10 - 1) / (16 << 10)
		// gatherMax holds 15 full records with their overhead.
		if most := records/15 + 1; writes > int64(most) {
			t.Errorf("%d bytes (%d records) in %d writes, want at most %d", size, records, writes, most)
		}
	}
	// What crypto/tls writes outside a Write (the close alert) still goes out.
	s.Close()
	if n, err := c.Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("after the server closed: read %d, %v; want EOF (its close_notify)", n, err)
	}
}
