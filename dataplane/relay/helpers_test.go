package relay

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"testing"
	"time"
)

// testCA issues node certificates in memory.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pool *x509.CertPool
}

func newTestCA(tb testing.TB) *testCA {
	tb.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "cluster CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true,
		BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		tb.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &testCA{cert: cert, key: key, pool: pool}
}

// issue returns a TLS configuration with a node certificate naming id,
// trusting the CA both ways.
func (ca *testCA) issue(tb testing.TB, id string) *tls.Config {
	tb.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: id}, DNSNames: []string{id},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		tb.Fatal(err)
	}
	return &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}},
		RootCAs: ca.pool, ClientCAs: ca.pool, MinVersion: tls.VersionTLS12}
}

// peerListener serves h as a node's peer listener does: HTTP/1.1 and h2c,
// or, with conf, both over mutual TLS. It returns the address.
func peerListener(tb testing.TB, h http.Handler, conf *tls.Config) string {
	tb.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	srv := &http.Server{Handler: h, Protocols: Protocols(true), HTTP2: PeerServerHTTP2(), MaxHeaderBytes: MaxHeaderList}
	var s interface {
		Serve(net.Listener) error
		Close() error
	} = srv
	if conf != nil { // as a node serves its peer listener over mutual TLS
		s = NewTLSServer(srv, ServerTLS(conf), slog.Default())
	}
	go s.Serve(l)
	tb.Cleanup(func() { s.Close() })
	return l.Addr().String()
}

// tlsPair starts h behind a mutual-TLS peer listener for member "owner"
// and returns its address and a client configuration of member "relay".
func tlsPair(tb testing.TB, h http.Handler, cfg Config) (string, Config) {
	ca := newTestCA(tb)
	addr := peerListener(tb, h, ca.issue(tb, "owner"))
	cfg.TLS = ca.issue(tb, "relay")
	cfg.PeerID = func(a string) (string, bool) { return "owner", a == addr }
	return addr, cfg
}
