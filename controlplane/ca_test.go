package controlplane

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"strings"
	"testing"
	"time"

	pb "github.com/shardcache/shardcache/proto/shardcache/v1"
)

func csrFor(t *testing.T, dnsNames ...string) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{Subject: pkix.Name{CommonName: dnsNames[0]}, DNSNames: dnsNames}, key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der})
}

func parseIssued(t *testing.T, c *pb.Certificate) (*x509.Certificate, *x509.CertPool) {
	t.Helper()
	if c.GetError() != "" {
		t.Fatalf("no certificate: %s", c.GetError())
	}
	block, _ := pem.Decode(c.GetCertificate())
	leaf, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(c.GetCa()) {
		t.Fatal("no CA certificate")
	}
	return leaf, pool
}

// TestCertificateAuthority: a node's CSR in its hello gets a short-lived
// certificate for its id, signed by the CA the replicas share; a renewal
// on the session gets a new one; a CSR for another id is refused.
func TestCertificateAuthority(t *testing.T) {
	endpoint := testEtcd(t)
	ca := func(c *Config) { c.CA = CAConfig{Enabled: true, CertTTL: time.Minute} }
	s1, _, _ := startServer(t, []string{endpoint}, ca)
	s2, _, _ := startServer(t, []string{endpoint}, ca)

	_, snap := openSessionWith(t, dial(t, s1), &pb.Hello{Member: &pb.Member{Id: "n1", PeerAddress: "127.0.0.1:9999"}, Csr: csrFor(t, "n1")})
	leaf, pool := parseIssued(t, snap.GetCertificate())
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool, DNSName: "n1", KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Fatalf("issued certificate does not verify as n1's client certificate: %v", err)
	}
	if life := time.Until(leaf.NotAfter); life > time.Minute || life < 50*time.Second {
		t.Fatalf("certificate lives %s, want the configured minute", life)
	}

	// The other replica signs with the same CA, and renews on the session.
	n2, snap2 := openSessionWith(t, dial(t, s2), &pb.Hello{Member: &pb.Member{Id: "n2", PeerAddress: "127.0.0.1:9998"}, Csr: csrFor(t, "n2")})
	leaf2, _ := parseIssued(t, snap2.GetCertificate())
	if _, err := leaf2.Verify(x509.VerifyOptions{Roots: pool, DNSName: "n2", KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
		t.Fatalf("the second replica's certificate does not chain to the shared CA: %v", err)
	}
	if err := n2.stream.Send(&pb.SessionRequest{Msg: &pb.SessionRequest_CertificateRequest{CertificateRequest: &pb.CertificateRequest{Csr: csrFor(t, "n2")}}}); err != nil {
		t.Fatal(err)
	}
	for {
		resp, err := n2.stream.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if c := resp.GetCertificate(); c != nil {
			renewed, _ := parseIssued(t, c)
			if renewed.SerialNumber.Cmp(leaf2.SerialNumber) == 0 {
				t.Fatal("the renewal returned the same certificate")
			}
			break
		}
	}

	// A CSR for another member's id is refused, with the reason.
	_, snap3 := openSessionWith(t, dial(t, s1), &pb.Hello{Member: &pb.Member{Id: "n3", PeerAddress: "127.0.0.1:9997"}, Csr: csrFor(t, "n1")})
	if c := snap3.GetCertificate(); len(c.GetCertificate()) != 0 || !strings.Contains(c.GetError(), `may only ask for its own member id "n3"`) {
		t.Fatalf("a CSR for n1 on n3's session got %q / error %q; want a refusal", c.GetCertificate(), c.GetError())
	}
}

func TestNoCertificatesWithoutCA(t *testing.T) {
	s, _, _ := startServer(t, nil)
	_, snap := openSessionWith(t, dial(t, s), &pb.Hello{Member: &pb.Member{Id: "n1", PeerAddress: "127.0.0.1:9999"}, Csr: csrFor(t, "n1")})
	if c := snap.GetCertificate(); len(c.GetCertificate()) != 0 || !strings.Contains(c.GetError(), "issues no certificates") {
		t.Fatalf("without a CA: certificate %q, error %q", c.GetCertificate(), c.GetError())
	}
}
