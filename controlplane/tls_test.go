package controlplane

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"

	pb "github.com/shardcache/shardcache/proto/shardcache/v1"
)

// testCA issues certificates for TLS tests.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

func newTestCA(t *testing.T, name string) *testCA {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name}, NotBefore: time.Now().Add(-time.Hour),
		NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	return &testCA{cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// issue returns a certificate and key (PEM) for cn, for server or client use.
func (ca *testCA) issue(t *testing.T, cn string, server bool) (certPEM, keyPEM []byte) {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	if server {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		tmpl.IPAddresses = []net.IP{net.ParseIP("127.0.0.1")}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kb, _ := x509.MarshalECPrivateKey(key)
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb})
}

func writeFile(t *testing.T, dir, name string, b []byte) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestAdminMutualTLS(t *testing.T) {
	dir := t.TempDir()
	ca := newTestCA(t, "shardcache test CA")
	srvCert, srvKey := ca.issue(t, "control", true)
	s, _, _ := startServer(t, nil, func(c *Config) {
		c.TLS = TLSConfig{
			CertFile:     writeFile(t, dir, "server.pem", srvCert),
			KeyFile:      writeFile(t, dir, "server-key.pem", srvKey),
			ClientCAFile: writeFile(t, dir, "ca.pem", ca.pem),
		}
	})
	roots := x509.NewCertPool()
	roots.AddCert(ca.cert)
	dialTLS := func(certs ...tls.Certificate) pb.AdminServiceClient {
		conn, err := grpc.NewClient(s.Addr().String(), grpc.WithTransportCredentials(credentials.NewTLS(
			&tls.Config{RootCAs: roots, Certificates: certs, MinVersion: tls.VersionTLS12})))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		return pb.NewAdminServiceClient(conn)
	}
	pair := func(c *testCA, cn string) tls.Certificate {
		certPEM, keyPEM := c.issue(t, cn, false)
		kp, err := tls.X509KeyPair(certPEM, keyPEM)
		if err != nil {
			t.Fatal(err)
		}
		return kp
	}
	ctx := context.Background()

	// A client certificate from the cluster's CA replaces the token.
	if _, err := dialTLS(pair(ca, "operator")).ListNodes(ctx, &pb.ListNodesRequest{}); err != nil {
		t.Fatalf("with a client certificate: %v", err)
	}
	// Without a certificate, the token is still required.
	if _, err := dialTLS().ListNodes(ctx, &pb.ListNodesRequest{}); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("no certificate, no token: %v, want Unauthenticated", err)
	}
	if _, err := dialTLS().ListNodes(adminCtx(ctx, testToken), &pb.ListNodesRequest{}); err != nil {
		t.Fatalf("token over TLS: %v", err)
	}
	// A certificate from another CA fails the handshake: no data.
	other := newTestCA(t, "someone else")
	if _, err := dialTLS(pair(other, "intruder")).ListNodes(ctx, &pb.ListNodesRequest{}); err == nil {
		t.Fatal("a certificate from another CA was accepted")
	}
	// Plaintext clients cannot talk to a TLS listener.
	if _, err := pb.NewAdminServiceClient(dial(t, s)).ListNodes(adminCtx(ctx, testToken), &pb.ListNodesRequest{}); err == nil {
		t.Fatal("a plaintext call to the TLS listener succeeded")
	}
}

func TestTLSConfigValidation(t *testing.T) {
	c := Config{EmbeddedEtcd: EmbeddedEtcdConfig{Dir: "/tmp/x"}, TLS: TLSConfig{ClientCAFile: "ca.pem"}}
	c.setDefaults()
	if err := c.Validate(); err == nil {
		t.Fatal("a client CA without a server certificate was accepted")
	}
	c.TLS = TLSConfig{CertFile: "c.pem"}
	c.AdminToken = "t"
	if err := c.Validate(); err == nil {
		t.Fatal("a certificate without a key was accepted")
	}
}
