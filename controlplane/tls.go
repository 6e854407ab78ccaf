package controlplane

import (
	"context"
	"crypto/ecdsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
)

// serverCredentials returns the gRPC options for cfg: none for plaintext,
// TLS with the server's certificate (from files, or issued by ca for
// cfg.Names), and client-certificate verification when a client CA is
// given. Clients without a certificate may still connect (nodes,
// token-bearing admins); admin calls then need the token.
func serverCredentials(cfg TLSConfig, ca *certAuthority) ([]grpc.ServerOption, error) {
	if !cfg.enabled() {
		return nil, nil
	}
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	if cfg.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(cfg.CertFile, cfg.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("loading TLS certificate %s: %w", cfg.CertFile, err)
		}
		tc.Certificates = []tls.Certificate{cert}
	} else {
		own := &ownCert{ca: ca, names: cfg.Names}
		if _, err := own.get(nil); err != nil {
			return nil, err
		}
		tc.GetCertificate = own.get
	}
	if cfg.ClientCAFile != "" {
		pem, err := os.ReadFile(cfg.ClientCAFile)
		if err != nil {
			return nil, fmt.Errorf("reading client CA: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("client CA %s holds no PEM certificate", cfg.ClientCAFile)
		}
		tc.ClientCAs = pool
		tc.ClientAuth = tls.VerifyClientCertIfGiven
	}
	return []grpc.ServerOption{grpc.Creds(credentials.NewTLS(tc))}, nil
}

// ownCert is the replica's TLS certificate issued by its own CA for its
// names, issued anew two thirds into its life.
type ownCert struct {
	ca    *certAuthority
	names []string

	mu      sync.Mutex
	cert    *tls.Certificate
	renewAt time.Time
}

func (o *ownCert) get(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.cert != nil && time.Now().Before(o.renewAt) {
		return o.cert, nil
	}
	cert, notAfter, err := o.ca.issueServer(o.names)
	if err != nil {
		if o.cert != nil {
			return o.cert, nil // the one in hand is still valid
		}
		return nil, fmt.Errorf("issuing the control plane's TLS certificate: %w", err)
	}
	now := time.Now()
	o.cert, o.renewAt = cert, now.Add(notAfter.Sub(now)*2/3)
	return cert, nil
}

// verifiedClientCert reports whether the caller presented a client
// certificate that the TLS handshake verified against the client CA, and
// that is no member's peer certificate: the client CA may be the cluster
// CA, which issues one to every node that holds the join token.
func verifiedClientCert(ctx context.Context) bool {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return false
	}
	ti, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok || len(ti.State.VerifiedChains) == 0 {
		return false
	}
	return !slices.Contains(ti.State.PeerCertificates[0].Subject.OrganizationalUnit, peerCertUnit)
}

// client is the TLS configuration of the replica's etcd client; nil when
// no file is named.
func (t EtcdTLSConfig) client() (*tls.Config, error) {
	if !t.enabled() {
		return nil, nil
	}
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	if t.CAFile != "" {
		pem, err := os.ReadFile(t.CAFile)
		if err != nil {
			return nil, fmt.Errorf("reading the etcd CA: %w", err)
		}
		tc.RootCAs = x509.NewCertPool()
		if !tc.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("etcd CA %s holds no PEM certificate", t.CAFile)
		}
	}
	if t.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("loading the etcd client certificate %s: %w", t.CertFile, err)
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	return tc, nil
}

// GenerateTLS makes the files of a control plane's TLS for names (DNS
// names or IP addresses): a CA certificate of its own (ten years), and a
// server certificate it signs (validity) with its key, all PEM. Nodes
// and cachectl verify the control plane with the CA certificate; the CA's
// key is not kept.
func GenerateTLS(names []string, validity time.Duration) (caCert, cert, key []byte, err error) {
	if len(names) == 0 {
		return nil, nil, nil, errors.New("the certificate needs at least one name")
	}
	caPEM, caKeyPEM, err := generateCA()
	if err != nil {
		return nil, nil, nil, err
	}
	pair, err := tls.X509KeyPair(caPEM, caKeyPEM)
	if err != nil {
		return nil, nil, nil, err
	}
	ca, err := newCA(pair, validity)
	if err != nil {
		return nil, nil, nil, err
	}
	c, _, err := ca.issueServer(names)
	if err != nil {
		return nil, nil, nil, err
	}
	kder, err := x509.MarshalECPrivateKey(c.PrivateKey.(*ecdsa.PrivateKey))
	if err != nil {
		return nil, nil, nil, err
	}
	return caPEM, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Certificate[0]}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), nil
}
