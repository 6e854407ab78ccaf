package dataplane

import (
	"crypto/tls"
	"crypto/x509"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/shardcache/shardcache/dataplane/hop"
	pb "github.com/shardcache/shardcache/proto/shardcache/v1"
)

// A member that stops reading its keep-alive HTTP/1.1 connection over
// mutual TLS must not hold the node's handler, and the object it reads,
// for as long as the connection lives: once no byte is taken for the
// peer send bound, the connection is closed (and counted).
func TestAPeerConnectionThatTakesNothingIsClosed(t *testing.T) {
	big := strings.Repeat("x", 8<<20) // more than the sockets' buffers hold
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=600")
		w.Write([]byte(big))
	}))
	defer origin.Close()
	ca := newClusterCA(t, t.TempDir())
	fc := startFakeControl(t, "127.0.0.1:0")
	a := startNode(t, "a", fc.addr, origin.URL, noHotKeys, func(c *Config) {
		c.PeerTLS, c.MaxObjectBytes = ca.issue(t, "a"), 16<<20
		c.ClientSendTimeout, c.OriginTimeout, c.RelayTimeout = 100*time.Millisecond, 100*time.Millisecond, 200*time.Millisecond
	})
	e := epochOf(1, a)
	e.Members = append(e.Members, &pb.Member{Id: "b", PeerAddress: "127.0.0.1:1", State: pb.MemberState_MEMBER_STATE_ACTIVE})
	fc.publish(e)
	waitEpoch(t, a, 1)
	path := pathOwnedBy(t, e, "/big/", "a")
	if resp, _ := do(t, "GET", "http://"+a.ClientAddr().String()+path); resp.StatusCode != 200 {
		t.Fatal(resp.Status)
	}

	files := ca.issue(t, "b")
	cert, err := tls.LoadX509KeyPair(files.CertFile, files.KeyFile)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca.cert)
	// A small receive buffer, so that the answer fills the sockets soon.
	d := &net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
		return c.Control(func(fd uintptr) { syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096) })
	}}
	c, err := tls.DialWithDialer(d, "tcp", a.PeerAddr().String(), &tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: roots,
		ServerName: "a", NextProtos: []string{"http/1.1"}, MinVersion: tls.VersionTLS12})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte("GET " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\n" + hop.Marker + ": b\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	// Nothing is read from here on.
	waitFor(t, "the connection that takes nothing to be closed", func() bool {
		return metricValue(t, a, "shardcache_peer_stalled_total") >= 1
	})
}
