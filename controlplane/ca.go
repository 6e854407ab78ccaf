package controlplane

import (
	"bytes"
	"context"
	"crypto"
	"crypto/aes"
	"crypto/cipher"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"slices"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/shardcache/shardcache/proto/shardcache/v1"
)

// certAuthority signs nodes' peer-hop certificates.
type certAuthority struct {
	cert    *x509.Certificate
	certPEM []byte
	key     crypto.Signer
	ttl     time.Duration
}

// loadCA reads the CA from files, or adopts the one the replicas share in
// etcd, generating it if no replica has yet. In etcd the CA's key is
// sealed with the key in SealKeyFile; a key a former version kept in the
// clear is sealed on load.
func (s *Server) loadCA(ctx context.Context) (*certAuthority, error) {
	c := s.cfg.CA
	if c.CertFile != "" {
		pair, err := tls.LoadX509KeyPair(c.CertFile, c.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("certificate authority: %w", err)
		}
		return newCA(pair, c.CertTTL)
	}
	seal, err := loadSealKey(c.SealKeyFile)
	if err != nil {
		return nil, err
	}
	key := s.cfg.Prefix + "ca"
	resp, err := s.etcd.Get(ctx, key)
	if err != nil {
		return nil, fmt.Errorf("%w: reading the shared certificate authority: %v", ErrEtcd, err)
	}
	if len(resp.Kvs) > 0 {
		ca, clear, err := openShared(resp.Kvs[0].Value, seal, c.CertTTL)
		if err != nil {
			return nil, err
		}
		if clear != nil {
			// Kept in the clear by a former version: seal it in place,
			// unless another replica changed it meanwhile.
			txn, err := s.etcd.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", resp.Kvs[0].ModRevision)).
				Then(clientv3.OpPut(key, string(clear))).Commit()
			if err != nil {
				return nil, fmt.Errorf("%w: sealing the shared certificate authority: %v", ErrEtcd, err)
			}
			if txn.Succeeded {
				s.log.Warn("sealed the cluster certificate authority's key, which etcd held in the clear", "etcd_key", key)
			}
		}
		return ca, nil
	}
	certPEM, keyPEM, err := generateCA()
	if err != nil {
		return nil, err
	}
	b, err := sealShared(certPEM, keyPEM, seal)
	if err != nil {
		return nil, err
	}
	// Only the first replica's CA is kept; the others adopt it.
	txn, err := s.etcd.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
		Then(clientv3.OpPut(key, string(b))).Else(clientv3.OpGet(key)).Commit()
	if err != nil {
		return nil, fmt.Errorf("%w: storing the shared certificate authority: %v", ErrEtcd, err)
	}
	if txn.Succeeded {
		s.log.Info("generated the cluster certificate authority; its key is sealed in etcd", "etcd_key", key)
		ca, _, err := openShared(b, seal, c.CertTTL)
		return ca, err
	}
	kvs := txn.Responses[0].GetResponseRange().GetKvs()
	if len(kvs) == 0 {
		return nil, fmt.Errorf("%w: the shared certificate authority vanished while being stored", ErrEtcd)
	}
	ca, _, err := openShared(kvs[0].Value, seal, c.CertTTL)
	return ca, err
}

// sharedCA is the CA as kept in etcd: the certificate, and the key sealed
// (nonce and AES-256-GCM ciphertext). Key is the clear key of a former
// version, read only to seal it.
type sharedCA struct {
	Cert      string `json:"cert"`
	SealedKey []byte `json:"sealed_key,omitempty"`
	Key       string `json:"key,omitempty"`
}

// loadSealKey derives the AES-256 key that seals the CA key from the
// secret in path.
func loadSealKey(path string) (cipher.AEAD, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("certificate authority seal key: %w", err)
	}
	b = bytes.TrimSpace(b)
	if len(b) < 32 {
		return nil, fmt.Errorf("certificate authority seal key %s holds %d bytes; want at least 32 random bytes", path, len(b))
	}
	sum := sha256.Sum256(b)
	block, err := aes.NewCipher(sum[:])
	if err != nil {
		return nil, err
	}
	return cipher.NewGCM(block)
}

// sealShared is the CA as etcd keeps it, its key sealed.
func sealShared(certPEM, keyPEM []byte, seal cipher.AEAD) ([]byte, error) {
	nonce := make([]byte, seal.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		return nil, err
	}
	return json.Marshal(sharedCA{Cert: string(certPEM), SealedKey: seal.Seal(nonce, nonce, keyPEM, certPEM)})
}

// openShared reads the CA kept in etcd. For a key kept in the clear, it
// also returns the record sealed, to store instead.
func openShared(b []byte, seal cipher.AEAD, ttl time.Duration) (*certAuthority, []byte, error) {
	var sc sharedCA
	if err := json.Unmarshal(b, &sc); err != nil {
		return nil, nil, fmt.Errorf("certificate authority in etcd does not parse: %w", err)
	}
	keyPEM := []byte(sc.Key)
	var resealed []byte
	switch {
	case len(sc.SealedKey) > 0:
		n := seal.NonceSize()
		if len(sc.SealedKey) < n {
			return nil, nil, errors.New("certificate authority in etcd: the sealed key is truncated")
		}
		var err error
		if keyPEM, err = seal.Open(nil, sc.SealedKey[:n], sc.SealedKey[n:], []byte(sc.Cert)); err != nil {
			return nil, nil, errors.New("certificate authority in etcd: the seal key does not open its key (another --ca-seal-key-file than the replica that stored it?)")
		}
	case sc.Key != "":
		var err error
		if resealed, err = sealShared([]byte(sc.Cert), keyPEM, seal); err != nil {
			return nil, nil, err
		}
	default:
		return nil, nil, errors.New("certificate authority in etcd holds no key")
	}
	pair, err := tls.X509KeyPair([]byte(sc.Cert), keyPEM)
	if err != nil {
		return nil, nil, fmt.Errorf("certificate authority in etcd: %w", err)
	}
	ca, err := newCA(pair, ttl)
	return ca, resealed, err
}

func newCA(pair tls.Certificate, ttl time.Duration) (*certAuthority, error) {
	cert, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		return nil, fmt.Errorf("certificate authority: %w", err)
	}
	if !cert.IsCA {
		return nil, errors.New("certificate authority: the certificate is not a CA certificate")
	}
	signer, ok := pair.PrivateKey.(crypto.Signer)
	if !ok {
		return nil, errors.New("certificate authority: the key cannot sign")
	}
	return &certAuthority{cert: cert, certPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Raw}), key: signer, ttl: ttl}, nil
}

// generateCA makes a self-signed ECDSA P-256 CA valid for ten years.
func generateCA() (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "shardcache cluster CA"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().AddDate(10, 0, 0),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, err
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), nil
}

func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	return n
}

// issue signs a certificate for member id from a PEM CSR that names it
// (its first DNS name, or its common name). A CSR for another id is
// refused: a node gets a certificate for itself only.
func (ca *certAuthority) issue(csrPEM []byte, id string) (*pb.Certificate, error) {
	block, _ := pem.Decode(csrPEM)
	if block == nil || block.Type != "CERTIFICATE REQUEST" {
		return nil, errors.New("the CSR is not a PEM certificate request")
	}
	csr, err := x509.ParseCertificateRequest(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("the CSR does not parse: %w", err)
	}
	if err := csr.CheckSignature(); err != nil {
		return nil, fmt.Errorf("the CSR's signature is wrong: %w", err)
	}
	named := csr.Subject.CommonName
	if len(csr.DNSNames) > 0 {
		named = csr.DNSNames[0]
	}
	if named != id || len(csr.DNSNames) > 1 || len(csr.IPAddresses)+len(csr.URIs)+len(csr.EmailAddresses) > 0 {
		return nil, fmt.Errorf("the CSR names %q (and %d other names); a node may only ask for its own member id %q", named, max(len(csr.DNSNames)-1, 0), id)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		// Marked as a member's: it is never an admin credential, though
		// the client CA admin calls are checked against be this CA.
		Subject:     pkix.Name{CommonName: id, OrganizationalUnit: []string{peerCertUnit}},
		DNSNames:    []string{id},
		NotBefore:   now.Add(-time.Minute), // clocks differ a little
		NotAfter:    now.Add(ca.ttl),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, csr.PublicKey, ca.key)
	if err != nil {
		return nil, fmt.Errorf("signing: %w", err)
	}
	return &pb.Certificate{
		Certificate: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		Ca:          ca.certPEM,
		NotAfter:    timestamppb.New(tmpl.NotAfter),
	}, nil
}

// peerCertUnit is the organizational unit of every peer certificate the
// CA issues to a member.
const peerCertUnit = "shardcache node"

// issueServer signs a TLS server certificate for the control plane's own
// names (DNS names or IP addresses), with a key made for it.
func (ca *certAuthority) issueServer(names []string) (*tls.Certificate, time.Time, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, time.Time{}, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: names[0], OrganizationalUnit: []string{"shardcache control plane"}},
		NotBefore:    now.Add(-time.Minute),
		NotAfter:     now.Add(max(ca.ttl, time.Hour)),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		// The names the control plane serves as: no node is issued them.
	}
	for _, n := range names {
		if ip := net.ParseIP(n); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, n)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("signing: %w", err)
	}
	return &tls.Certificate{Certificate: [][]byte{der, ca.cert.Raw}, PrivateKey: key}, tmpl.NotAfter, nil
}

// certificate answers a node's CSR: the certificate, or why there is none.
func (n *nodeService) certificate(csr []byte, id string) *pb.Certificate {
	ca := n.ca.Load()
	if ca == nil {
		if n.caWanted {
			return &pb.Certificate{Error: "the certificate authority is not loaded yet; ask again"}
		}
		return &pb.Certificate{Error: "this control plane issues no certificates (start it with the certificate authority on)"}
	}
	if slices.ContainsFunc(n.tlsNames, func(name string) bool {
		return strings.EqualFold(strings.TrimRight(name, "."), strings.TrimRight(id, "."))
	}) {
		// A peer certificate for a name the control plane serves TLS as
		// would let its holder pose as the control plane.
		n.log.Warn("refused a certificate request for one of the control plane's own TLS names", "node", id)
		return &pb.Certificate{Error: fmt.Sprintf("member id %q is one of the control plane's TLS names: choose another id", id)}
	}
	cert, err := ca.issue(csr, id)
	if err != nil {
		n.log.Warn("refused a certificate request", "node", id, "err", err)
		return &pb.Certificate{Error: err.Error()}
	}
	n.log.Info("issued a peer certificate", "node", id, "not_after", cert.GetNotAfter().AsTime())
	return cert
}
