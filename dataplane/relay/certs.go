package relay

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	pb "github.com/shardcache/shardcache/proto/shardcache/v1"
)

// Certs is the peer hop's certificate when the control plane issues
// it: a key made at start, a CSR naming the node's id, and the current
// certificate and cluster CA, replaced on every renewal. Handshakes read
// the current ones, so a renewal needs no restart and breaks no
// connection.
type Certs struct {
	id  string
	key *ecdsa.PrivateKey
	csr []byte

	mu       sync.RWMutex
	cert     *tls.Certificate
	pool     *x509.CertPool
	notAfter time.Time
	renewAt  time.Time
	ready    chan struct{} // closed at the first certificate
	once     sync.Once
}

// NewCerts makes the key and certificate request for node id.
func NewCerts(id string) (*Certs, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("peer key: %w", err)
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{
		Subject: pkix.Name{CommonName: id}, DNSNames: []string{id},
	}, key)
	if err != nil {
		return nil, fmt.Errorf("peer certificate request: %w", err)
	}
	return &Certs{id: id, key: key, csr: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}),
		ready: make(chan struct{})}, nil
}

// Install takes a certificate from the control plane, once it checks out:
// signed by the CA that came with it, for this node's id and key.
func (p *Certs) Install(c *pb.Certificate) error {
	if c.GetError() != "" {
		return errors.New(c.GetError())
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(c.GetCa()) {
		return errors.New("the issued certificate came without a CA certificate")
	}
	block, _ := pem.Decode(c.GetCertificate())
	if block == nil {
		return errors.New("the issued certificate is not PEM")
	}
	leaf, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return err
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool, DNSName: p.id, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
		return fmt.Errorf("the issued certificate does not verify for %s: %w", p.id, err)
	}
	if Identity(leaf) != p.id {
		return fmt.Errorf("the issued certificate names %q, not %q", Identity(leaf), p.id)
	}
	pub, ok := leaf.PublicKey.(*ecdsa.PublicKey)
	if !ok || !pub.Equal(&p.key.PublicKey) {
		return errors.New("the issued certificate is not for this node's key")
	}
	now := time.Now()
	p.mu.Lock()
	p.cert = &tls.Certificate{Certificate: [][]byte{leaf.Raw}, PrivateKey: p.key, Leaf: leaf}
	p.pool = pool
	p.notAfter = leaf.NotAfter
	// Renew two thirds into the remaining lifetime: well before expiry,
	// with room for retries if the control plane is away.
	p.renewAt = now.Add(leaf.NotAfter.Sub(now) * 2 / 3)
	p.mu.Unlock()
	p.once.Do(func() { close(p.ready) })
	return nil
}

func (p *Certs) current() (*tls.Certificate, error) {
	p.mu.RLock()
	defer p.mu.RUnlock()
	if p.cert == nil {
		return nil, errors.New("no peer certificate from the control plane yet")
	}
	return p.cert, nil
}

func (p *Certs) Roots() *x509.CertPool {
	p.mu.RLock()
	defer p.mu.RUnlock()
	return p.pool
}

// Due returns when to ask for a new certificate.
func (p *Certs) Due() (renewAt, notAfter time.Time) {
	p.mu.RLock()
	defer p.mu.RUnlock()
	return p.renewAt, p.notAfter
}

// ClientTLS is the relay's TLS configuration: the current certificate;
// the relay takes the current CA from roots at every dial.
func (p *Certs) ClientTLS() *tls.Config {
	return &tls.Config{
		MinVersion:           tls.VersionTLS12,
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return p.current() },
	}
}

// ServerTLS is the peer listener's TLS configuration: each handshake gets
// the current certificate and CA.
func (p *Certs) ServerTLS() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			cert, err := p.current()
			if err != nil {
				return nil, err
			}
			conf := ServerTLS(&tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{*cert}, ClientCAs: p.Roots()})
			return conf, nil
		},
		// Never used (GetConfigForClient answers), but net/http requires
		// a certificate source to serve TLS.
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return p.current() },
	}
}

// CSR is the PEM certificate request naming the node.
func (p *Certs) CSR() []byte { return p.csr }

// Ready is closed once the first certificate is installed.
func (p *Certs) Ready() <-chan struct{} { return p.ready }

// LoadTLS reads the peer hop's certificate and CA from files, for mutual
// TLS between nodes. The certificate must name node id.
func LoadTLS(certFile, keyFile, caFile, id string) (*tls.Config, error) {
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("peer TLS certificate: %w", err)
	}
	leaf, err := x509.ParseCertificate(cert.Certificate[0])
	if err != nil {
		return nil, fmt.Errorf("peer TLS certificate: %w", err)
	}
	if got := Identity(leaf); got != id {
		return nil, fmt.Errorf("peer TLS certificate %s names %q, not this node's id %q", certFile, got, id)
	}
	caPEM, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("peer TLS CA: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, fmt.Errorf("peer TLS CA %s holds no PEM certificate", caFile)
	}
	return &tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: pool, ClientCAs: pool, MinVersion: tls.VersionTLS12}, nil
}
