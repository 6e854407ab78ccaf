package dataplane

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"math/big"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/shardcache/shardcache/dataplane/hop"
	pb "github.com/shardcache/shardcache/proto/shardcache/v1"
)

// clusterCA issues node certificates for peer TLS tests, as PEM files.
type clusterCA struct {
	dir  string
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	file string
}

func newClusterCA(t *testing.T, dir string) *clusterCA {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "cluster CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true,
		BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	ca := &clusterCA{dir: dir, cert: cert, key: key, file: filepath.Join(dir, "ca.pem")}
	writePEM(t, ca.file, "CERTIFICATE", der)
	return ca
}

func writePEM(t *testing.T, path, kind string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}

// issue writes a node certificate naming id and returns the node's files.
func (ca *clusterCA) issue(t *testing.T, id string) PeerTLSFiles {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: id}, DNSNames: []string{id},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kb, _ := x509.MarshalECPrivateKey(key)
	f := PeerTLSFiles{CertFile: filepath.Join(ca.dir, id+".pem"), KeyFile: filepath.Join(ca.dir, id+"-key.pem"), CAFile: ca.file}
	writePEM(t, f.CertFile, "CERTIFICATE", der)
	writePEM(t, f.KeyFile, "EC PRIVATE KEY", kb)
	return f
}

func TestPeerHopOverMutualTLS(t *testing.T) {
	ca := newClusterCA(t, t.TempDir())
	fc := startFakeControl(t, "127.0.0.1:0")
	o := &testOrigin{}
	origin := httptest.NewServer(o)
	defer origin.Close()
	withTLS := func(f PeerTLSFiles) func(*Config) {
		return func(c *Config) { c.PeerTLS = f; c.HotThreshold = -1 }
	}
	a := startNode(t, "a", fc.addr, origin.URL, withTLS(ca.issue(t, "a")))
	b := startNode(t, "b", fc.addr, origin.URL, withTLS(ca.issue(t, "b")))
	e := epochOf(1, a, b)
	fc.publish(e)
	waitEpoch(t, a, 1)
	waitEpoch(t, b, 1)

	path := pathOwnedBy(t, e, "/k/", "b")
	for range 3 {
		resp, body := do(t, "GET", "http://"+a.ClientAddr().String()+path)
		if resp.StatusCode != 200 || body != "body of "+path || resp.Header.Get("X-Cache-Node") != "b" {
			t.Fatalf("over mutual TLS: %d %q from %q, want the owner b", resp.StatusCode, body, resp.Header.Get("X-Cache-Node"))
		}
	}
	// A request is counted as its handler ends, just after the answer.
	waitFor(t, "3 relayed requests counted", func() bool {
		return metricValue(t, a, "shardcache_requests_total", `route="relayed"`) == 3
	})
	// Without a client certificate of the cluster, the peer listener
	// refuses the connection, even for a caller that trusts the CA.
	roots := x509.NewCertPool()
	roots.AddCert(ca.cert)
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, ServerName: "b", MinVersion: tls.VersionTLS12}}}
	if resp, err := client.Get("https://" + b.PeerAddr().String() + path); err == nil {
		resp.Body.Close()
		t.Fatalf("a caller without a cluster certificate got %d", resp.StatusCode)
	}
}

func TestPeerPresentingAnotherMembersCertificateIsRefused(t *testing.T) {
	ca := newClusterCA(t, t.TempDir())
	fc := startFakeControl(t, "127.0.0.1:0")
	origin := httptest.NewServer(&testOrigin{})
	defer origin.Close()
	a := startNode(t, "a", fc.addr, origin.URL, func(c *Config) { c.PeerTLS = ca.issue(t, "a"); c.HotThreshold, c.HandoffWindow = -1, -1 })
	// c holds a good certificate, but for c; the epoch says b listens there.
	c := startNode(t, "c", fc.addr, origin.URL, func(cf *Config) { cf.PeerTLS = ca.issue(t, "c"); cf.HotThreshold, cf.HandoffWindow = -1, -1 })
	e := epochOf(1, a)
	e.Members = append(e.Members, &pb.Member{Id: "b", PeerAddress: c.PeerAddr().String(), State: pb.MemberState_MEMBER_STATE_ACTIVE})
	fc.publish(e)
	waitEpoch(t, a, 1)

	path := pathOwnedBy(t, e, "/k/", "b")
	resp, _ := do(t, "GET", "http://"+a.ClientAddr().String()+path)
	if resp.StatusCode != 200 || resp.Header.Get("X-Cache-Node") != "a" {
		t.Fatalf("relay to an impostor: %d from %q; want a to refuse it and serve the request itself", resp.StatusCode, resp.Header.Get("X-Cache-Node"))
	}
	if got := metricValue(t, a, "shardcache_peer_requests_total", `peer="b"`, `result="error"`); got != 1 {
		t.Fatalf("peer errors for b: %v, want 1 (the refused handshake)", got)
	}
}

func TestPeerCertificateMustNameTheNode(t *testing.T) {
	ca := newClusterCA(t, t.TempDir())
	_, err := New(Config{ID: "a", ControlPlane: "127.0.0.1:1", Origin: "http://127.0.0.1:1", PeerTLS: ca.issue(t, "b")})
	if err == nil || !strings.Contains(err.Error(), `names "b"`) {
		t.Fatalf("New with another node's certificate: %v", err)
	}
}

// A caller with a certificate of the cluster CA that names no member of
// the ring is refused, whatever it sends: nothing it asks for is fetched
// or stored, nothing it invalidates is dropped. A certificate of another
// CA fails the handshake.
func TestPeerListenerRefusesCallersThatAreNotMembers(t *testing.T) {
	ca := newClusterCA(t, t.TempDir())
	fc := startFakeControl(t, "127.0.0.1:0")
	o := &testOrigin{}
	origin := httptest.NewServer(o)
	defer origin.Close()
	a := startNode(t, "a", fc.addr, origin.URL, func(c *Config) { c.PeerTLS = ca.issue(t, "a"); c.HotThreshold = -1 })
	fc.publish(epochOf(1, a))
	waitEpoch(t, a, 1)
	// A stored key, to try to drop.
	if resp, _ := do(t, "GET", "http://"+a.ClientAddr().String()+"/kept"); resp.StatusCode != 200 {
		t.Fatal(resp.Status)
	}

	// Over either class of the hop: HTTP/2, and keep-alive HTTP/1.1.
	tlsClient := func(f PeerTLSFiles, roots *x509.CertPool, h2 bool) *http.Client {
		cert, err := tls.LoadX509KeyPair(f.CertFile, f.KeyFile)
		if err != nil {
			t.Fatal(err)
		}
		return &http.Client{Transport: &http.Transport{ForceAttemptHTTP2: h2, TLSClientConfig: &tls.Config{
			Certificates: []tls.Certificate{cert}, RootCAs: roots, ServerName: "a", MinVersion: tls.VersionTLS12}}}
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca.cert)
	malloryFiles := ca.issue(t, "mallory")
	send := func(c *http.Client, path string, hdr ...string) (*http.Response, string, error) {
		req, _ := http.NewRequest("GET", "https://"+a.PeerAddr().String()+path, nil)
		req.Header.Set(hop.Marker, "mallory")
		req.Header.Set("X-Forwarded-Host", "evil.example")
		for i := 0; i < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		resp, err := c.Do(req)
		if err != nil {
			return nil, "", err
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp, string(b), nil
	}
	for _, h2 := range []bool{true, false} {
		mallory, proto := tlsClient(malloryFiles, roots, h2), 1
		if h2 {
			proto = 2
		}
		for _, attempt := range []struct {
			path string
			hdr  []string
		}{{"/poisoned", nil}, {"/kept", []string{hop.InvalidateField, "1"}}, {"/", []string{hop.HotKeysField, "10"}}} {
			resp, body, err := send(mallory, attempt.path, attempt.hdr...)
			if err != nil {
				t.Fatal(err)
			}
			want := `peer listener: the certificate names "mallory", not a member of the ring`
			if resp.StatusCode != http.StatusForbidden || resp.ProtoMajor != proto || resp.Header.Get(hop.RefusedField) != "not_a_member" || strings.TrimSpace(body) != want {
				t.Fatalf("a non-member's %s %v over HTTP/%d: %s over %s, %s %q, %q; want 403 not_a_member %q",
					attempt.path, attempt.hdr, proto, resp.Status, resp.Proto, hop.RefusedField, resp.Header.Get(hop.RefusedField), body, want)
			}
		}
		other := newClusterCA(t, t.TempDir())
		if _, _, err := send(tlsClient(other.issue(t, "a"), roots, h2), "/poisoned"); err == nil {
			t.Fatalf("a certificate of another CA passed the handshake over HTTP/%d", proto)
		}
	}
	if got := metricValue(t, a, "shardcache_peer_refused_total", `reason="not_a_member"`); got != 6 {
		t.Fatalf("refused as not a member: %v, want 6 (3 over each protocol)", got)
	}
	if n := o.count("/poisoned"); n != 0 {
		t.Fatalf("refused peer requests reached the origin %d times", n)
	}
	resp, _ := do(t, "GET", "http://"+a.ClientAddr().String()+"/kept")
	if resp.Header.Get("X-Cache") != "HIT" || o.count("/kept") != 1 {
		t.Fatalf("after a non-member's invalidation: %s, %d origin requests; want the stored HIT", resp.Header.Get("X-Cache"), o.count("/kept"))
	}
}

// A peer listener off loopback without certificates is refused at start,
// naming the flags; the explicit insecure setting is accepted, and says so.
func TestPeerHopOffLoopbackNeedsCertificatesOrTheInsecureFlag(t *testing.T) {
	check := func(c Config) error {
		c.setDefaults()
		return c.Validate()
	}
	cfg := Config{ID: "a", ControlPlane: "127.0.0.1:1", Origin: "http://127.0.0.1:1", PeerAddr: "10.1.2.3:9080"}
	if _, err := New(cfg); err == nil || !strings.Contains(err.Error(), "--peer-certs-from-control-plane") || !strings.Contains(err.Error(), "--insecure-peer-hop") {
		t.Fatalf("New with a peer listener off loopback and no certificates: %v; want an error naming the flags", err)
	}
	for _, addr := range []string{"127.0.0.1:0", "[::1]:0", "localhost:0", "127.0.0.2:9080"} {
		cfg.PeerAddr = addr
		if err := check(cfg); err != nil {
			t.Fatalf("peer listener on loopback %s: %v", addr, err)
		}
		if got := cfg.peerHop(); got != "loopback" {
			t.Fatalf("peer hop on %s: %q, want loopback", addr, got)
		}
	}
	for _, addr := range []string{"0.0.0.0:9080", ":9080", "[::]:9080", "node-1.example:9080"} {
		cfg.PeerAddr = addr
		if err := check(cfg); err == nil {
			t.Fatalf("peer listener on %s without certificates was accepted", addr)
		}
	}
	cfg.PeerAddr, cfg.InsecurePeerHop = "10.1.2.3:9080", true
	if err := check(cfg); err != nil {
		t.Fatalf("with InsecurePeerHop: %v", err)
	}
	if got := cfg.peerHop(); got != "insecure" {
		t.Fatalf("peer hop %q, want insecure", got)
	}
	cfg.InsecurePeerHop, cfg.PeerTLS = false, newClusterCA(t, t.TempDir()).issue(t, "a")
	if err := check(cfg); err != nil {
		t.Fatalf("off loopback with certificates: %v", err)
	}
	if got := cfg.peerHop(); got != "mtls" {
		t.Fatalf("peer hop with certificates %q, want mtls", got)
	}
}
