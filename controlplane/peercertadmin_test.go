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
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"

	pb "github.com/shardcache/shardcache/proto/shardcache/v1"
)

// A node's peer certificate makes it a member on other nodes' peer ports,
// never an operator: with the cluster CA as the admin client CA (the one
// certificate cachectl verifies the control plane with), a certificate
// the control plane issued to a member, presented to AdminService, is
// refused like no certificate, while an operator's from that CA passes.
func TestAPeerCertificateIsNoAdminCredential(t *testing.T) {
	dir := t.TempDir()
	ca := newTestCA(t, "shardcache cluster CA")
	kb, err := x509.MarshalECPrivateKey(ca.key)
	if err != nil {
		t.Fatal(err)
	}
	caFile := writeFile(t, dir, "ca.pem", ca.pem)
	s, _, _ := startServer(t, nil, func(c *Config) {
		c.CA = CAConfig{Enabled: true, CertFile: caFile, KeyFile: writeFile(t, dir, "ca-key.pem", pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}))}
		c.TLS = TLSConfig{Names: []string{"127.0.0.1"}, ClientCAFile: caFile}
	})
	roots := x509.NewCertPool()
	roots.AddCert(ca.cert)
	dialTLS := func(certs ...tls.Certificate) *grpc.ClientConn {
		conn, err := grpc.NewClient(s.Addr().String(), grpc.WithTransportCredentials(credentials.NewTLS(
			&tls.Config{RootCAs: roots, Certificates: certs, MinVersion: tls.VersionTLS12})))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		return conn
	}

	// A member's certificate, as the control plane issues it.
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{Subject: pkix.Name{CommonName: "n1"}, DNSNames: []string{"n1"}}, key)
	if err != nil {
		t.Fatal(err)
	}
	_, snap := openSessionWith(t, dialTLS(), &pb.Hello{Member: &pb.Member{Id: "n1", PeerAddress: "127.0.0.1:9999"},
		Csr: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der})})
	leaf, _ := parseIssued(t, snap.GetCertificate())
	peerCert := tls.Certificate{Certificate: [][]byte{leaf.Raw}, PrivateKey: key}

	ctx := context.Background()
	_, err = pb.NewAdminServiceClient(dialTLS(peerCert)).DrainNode(ctx, &pb.DrainNodeRequest{NodeId: "n1"})
	if status.Code(err) != codes.Unauthenticated {
		t.Fatalf("DrainNode with a member's peer certificate: %v; want Unauthenticated", err)
	}
	if _, err := pb.NewAdminServiceClient(dialTLS(peerCert)).ListNodes(ctx, &pb.ListNodesRequest{}); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("ListNodes with a member's peer certificate: %v; want Unauthenticated", err)
	}
	// An operator's certificate from the same CA still replaces the token.
	certPEM, keyPEM := ca.issue(t, "operator", false)
	op, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pb.NewAdminServiceClient(dialTLS(op)).ListNodes(ctx, &pb.ListNodesRequest{}); err != nil {
		t.Fatalf("ListNodes with an operator's certificate: %v", err)
	}
}
