package dataplane

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/shardcache/shardcache/dataplane/relay"
	pb "github.com/shardcache/shardcache/proto/shardcache/v1"
)

// peerCerts is the peer hop's certificate when the control plane issues
// it: a key made at start, a CSR naming the node's id, and the current
// certificate and cluster CA, replaced on every renewal. Handshakes read
// the current ones, so a renewal needs no restart and breaks no
// connection.
type peerCerts struct {
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

func newPeerCerts(id string) (*peerCerts, error) {
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
	return &peerCerts{id: id, key: key, csr: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}),
		ready: make(chan struct{})}, nil
}

// install takes a certificate from the control plane, once it checks out:
// signed by the CA that came with it, for this node's id and key.
func (p *peerCerts) install(c *pb.Certificate) error {
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
	if relay.Identity(leaf) != p.id {
		return fmt.Errorf("the issued certificate names %q, not %q", relay.Identity(leaf), p.id)
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

func (p *peerCerts) current() (*tls.Certificate, error) {
	p.mu.RLock()
	defer p.mu.RUnlock()
	if p.cert == nil {
		return nil, errors.New("no peer certificate from the control plane yet")
	}
	return p.cert, nil
}

func (p *peerCerts) roots() *x509.CertPool {
	p.mu.RLock()
	defer p.mu.RUnlock()
	return p.pool
}

// due returns when to ask for a new certificate.
func (p *peerCerts) due() (renewAt, notAfter time.Time) {
	p.mu.RLock()
	defer p.mu.RUnlock()
	return p.renewAt, p.notAfter
}

// clientTLS is the relay's TLS configuration: the current certificate;
// the relay takes the current CA from roots at every dial.
func (p *peerCerts) clientTLS() *tls.Config {
	return &tls.Config{
		MinVersion:           tls.VersionTLS12,
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return p.current() },
	}
}

// serverTLS is the peer listener's TLS configuration: each handshake gets
// the current certificate and CA.
func (p *peerCerts) serverTLS() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			cert, err := p.current()
			if err != nil {
				return nil, err
			}
			conf := relay.ServerTLS(&tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{*cert}, ClientCAs: p.roots()})
			return conf, nil
		},
		// Never used (GetConfigForClient answers), but net/http requires
		// a certificate source to serve TLS.
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return p.current() },
	}
}

// applyCertificate installs a certificate the control plane sent.
func (n *Node) applyCertificate(c *pb.Certificate) {
	if n.certs == nil {
		return
	}
	if err := n.certs.install(c); err != nil {
		n.metrics.peerCerts.WithLabelValues("refused").Inc()
		n.log.Error("peer certificate from the control plane not installed", "err", err)
		return
	}
	_, notAfter := n.certs.due()
	n.metrics.peerCerts.WithLabelValues("installed").Inc()
	n.metrics.peerCertExpiry.Set(float64(notAfter.Unix()))
	n.log.Info("installed a peer certificate from the control plane", "not_after", notAfter)
}

// renewCertificates asks for a new certificate when the current one is
// two thirds through its life, again every so often until one comes, and
// every 3 seconds while there is none at all (the first one comes with the
// session's snapshot).
func (n *Node) renewCertificates(ctx context.Context) {
	lastAsk := time.Now()
	for {
		renewAt, notAfter := n.certs.due()
		var wait time.Duration
		switch {
		case renewAt.IsZero():
			if time.Since(lastAsk) >= 3*time.Second {
				n.session.RequestCertificate()
				lastAsk = time.Now()
			}
			wait = 200 * time.Millisecond
		case time.Now().Before(renewAt):
			wait = time.Until(renewAt)
		default:
			n.session.RequestCertificate()
			// Room for the answer before asking again.
			wait = max(min(time.Until(notAfter)/4, 2*time.Second), 100*time.Millisecond)
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}
