package controlplane

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

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
	seal := sealKeyFile(t, "a seal key of at least thirty-two bytes")
	ca := func(c *Config) { c.CA = CAConfig{Enabled: true, CertTTL: time.Minute, SealKeyFile: seal} }
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

// A member id is the DNS name its peer certificate is issued for, and a
// DNS name compares without case and without a trailing dot: an id that
// differs from a live member's, or from a name the control plane serves
// TLS as, only so is refused at hello. "CONTROL.TEST" was issued a
// certificate that verified as the control plane's control.test, and "N1"
// one that verified as n1's.
func TestAnIDNamingAnotherOnlyInCaseIsRefused(t *testing.T) {
	seal := sealKeyFile(t, "a seal key of at least thirty-two bytes")
	s, _, _ := startServer(t, []string{testEtcd(t)}, func(c *Config) { c.CA = CAConfig{Enabled: true, CertTTL: time.Minute, SealKeyFile: seal} })
	openSessionWith(t, dial(t, s), &pb.Hello{Member: &pb.Member{Id: "n1", PeerAddress: "127.0.0.1:9999"}, Csr: csrFor(t, "n1")})
	for _, id := range []string{"N1", "CONTROL.TEST", "control.test.", "n1."} {
		stream := sayHello(t, t.Context(), dial(t, s), &pb.Hello{Member: &pb.Member{Id: id, PeerAddress: "127.0.0.1:9998"}, Csr: csrFor(t, id)})
		resp, err := stream.Recv()
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "lower-case") {
			t.Errorf("hello as %q: %v %v, want InvalidArgument naming the rule", id, resp, err)
		}
	}

	// The control plane's own TLS names are compared without case.
	_, conn := startTLSServer(t, "Control.Test", "127.0.0.1")
	_, snap := openSessionWith(t, conn, &pb.Hello{Member: &pb.Member{Id: "control.test", PeerAddress: "127.0.0.1:9997"}, Csr: csrFor(t, "control.test")})
	if c := snap.GetCertificate(); len(c.GetCertificate()) != 0 || !strings.Contains(c.GetError(), "TLS names") {
		t.Fatalf("member control.test beside TLS name Control.Test: certificate %d bytes, error %q; want a refusal", len(c.GetCertificate()), c.GetError())
	}
}

func TestNoCertificatesWithoutCA(t *testing.T) {
	s, _, _ := startServer(t, nil)
	_, snap := openSessionWith(t, dial(t, s), &pb.Hello{Member: &pb.Member{Id: "n1", PeerAddress: "127.0.0.1:9999"}, Csr: csrFor(t, "n1")})
	if c := snap.GetCertificate(); len(c.GetCertificate()) != 0 || !strings.Contains(c.GetError(), "issues no certificates") {
		t.Fatalf("without a CA: certificate %q, error %q", c.GetCertificate(), c.GetError())
	}
}

// sealKeyFile writes a CA seal key and returns its path.
func sealKeyFile(t *testing.T, key string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "seal.key")
	if err := os.WriteFile(p, []byte(key+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// The CA kept in etcd has its key sealed: etcd holds no private key, a
// replica with another seal key cannot open it (and says so), and a key a
// former version kept in the clear is sealed when a replica loads it.
func TestTheCAKeyInEtcdIsSealed(t *testing.T) {
	endpoint := testEtcd(t)
	seal := sealKeyFile(t, "a seal key of at least thirty-two bytes")
	s1, cfg, _ := startServer(t, []string{endpoint}, func(c *Config) { c.CA = CAConfig{Enabled: true, CertTTL: time.Minute, SealKeyFile: seal} })
	cli := s1.etcd
	resp, err := cli.Get(context.Background(), s1.cfg.Prefix+"ca")
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("the CA in etcd: %v, %d keys", err, len(resp.Kvs))
	}
	stored := string(resp.Kvs[0].Value)
	if strings.Contains(stored, "PRIVATE KEY") || !strings.Contains(stored, "sealed_key") {
		t.Fatalf("etcd holds the CA key in the clear: %.200s", stored)
	}
	_, snap := openSessionWith(t, dial(t, s1), &pb.Hello{Member: &pb.Member{Id: "n1", PeerAddress: "127.0.0.1:9999"}, Csr: csrFor(t, "n1")})
	_, pool := parseIssued(t, snap.GetCertificate())

	other := cfg
	other.ListenAddr, other.OpsAddr = freeAddr(t), ""
	other.CA.SealKeyFile = sealKeyFile(t, "another seal key, also thirty-two bytes long")
	s2, err := New(other)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s2.Run(ctx); err == nil || !strings.Contains(err.Error(), "seal key does not open") {
		t.Fatalf("a replica with another seal key: %v; want it to refuse the CA", err)
	}

	// A CA in the clear, as a former version kept it, is sealed on load
	// and keeps issuing chains to the same root.
	var sc sharedCA
	certPEM, keyPEM, err := generateCA()
	if err != nil {
		t.Fatal(err)
	}
	sc.Cert, sc.Key = string(certPEM), string(keyPEM)
	clear, _ := json.Marshal(sc)
	legacy := s1.cfg.Prefix + "legacy/"
	if _, err := cli.Put(context.Background(), legacy+"ca", string(clear)); err != nil {
		t.Fatal(err)
	}
	s3, _, _ := startServer(t, []string{endpoint}, func(c *Config) {
		c.Prefix = legacy
		c.CA = CAConfig{Enabled: true, CertTTL: time.Minute, SealKeyFile: seal}
	})
	resp, err = cli.Get(context.Background(), legacy+"ca")
	if err != nil || strings.Contains(string(resp.Kvs[0].Value), "PRIVATE KEY") {
		t.Fatalf("the clear CA was not sealed on load: %v", err)
	}
	_, snap3 := openSessionWith(t, dial(t, s3), &pb.Hello{Member: &pb.Member{Id: "n3", PeerAddress: "127.0.0.1:9997"}, Csr: csrFor(t, "n3")})
	leaf3, pool3 := parseIssued(t, snap3.GetCertificate())
	if _, err := leaf3.Verify(x509.VerifyOptions{Roots: pool3, DNSName: "n3", KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
		t.Fatalf("after sealing, the certificate does not chain to the former CA: %v", err)
	}
	if pool3.Equal(pool) {
		t.Fatal("the legacy prefix shares the first CA; the test needs two")
	}
}

// A CA kept in etcd needs the seal key; a control plane off loopback
// needs a join token and TLS, or the insecure flags.
func TestInsecureSetupsAreRefusedAtStart(t *testing.T) {
	base := Config{ListenAddr: "127.0.0.1:0", EtcdEndpoints: []string{"http://127.0.0.1:2379"}, AdminToken: "t"}
	check := func(c Config, want string) {
		t.Helper()
		c.setDefaults()
		err := c.Validate()
		if want == "" && err != nil || want != "" && (err == nil || !strings.Contains(err.Error(), want)) {
			t.Fatalf("Validate: %v; want %q", err, want)
		}
	}
	c := base
	c.CA = CAConfig{Enabled: true}
	check(c, "--ca-seal-key-file")
	c.CA.SealKeyFile = "/run/secrets/seal"
	check(c, "")
	c = base
	c.ListenAddr = "0.0.0.0:7070"
	c.TLS.InsecurePlaintext = true
	check(c, "--join-token-file")
	c.InsecureOpenJoin = true
	check(c, "")
	c.InsecureOpenJoin, c.JoinToken = false, "j"
	check(c, "")
	c.TLS.InsecurePlaintext = false
	check(c, "--insecure-plaintext")
	c.TLS.CertFile, c.TLS.KeyFile = "tls.crt", "tls.key"
	check(c, "")
	c.TLS = TLSConfig{Names: []string{"control.example"}}
	check(c, "--ca")
	c.CA = CAConfig{Enabled: true, SealKeyFile: "/run/secrets/seal"}
	check(c, "")
	c.EtcdTLS.CertFile = "etcd.crt"
	check(c, "--etcd-key")
}
