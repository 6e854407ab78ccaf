package e2e

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
	"io"
	"math/big"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shardcache/shardcache/sdk/ring"
)

// testCA issues peer certificates as PEM files.
type testCA struct {
	dir  string
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	file string
}

func newTestCA(t *testing.T, name string) *testCA {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true,
		BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	ca := &testCA{dir: t.TempDir(), cert: cert, key: key}
	ca.file = filepath.Join(ca.dir, "ca.pem")
	writePEMFile(t, ca.file, "CERTIFICATE", der)
	return ca
}

func writePEMFile(t *testing.T, path, kind string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}

// issue writes a certificate naming id; it returns the cert and key files.
func (ca *testCA) issue(t *testing.T, id string) (certFile, keyFile string) {
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
	certFile, keyFile = filepath.Join(ca.dir, id+".pem"), filepath.Join(ca.dir, id+"-key.pem")
	writePEMFile(t, certFile, "CERTIFICATE", der)
	writePEMFile(t, keyFile, "EC PRIVATE KEY", kb)
	return certFile, keyFile
}

// echoOrigin answers with the host its request was for, as an origin that
// builds links from X-Forwarded-Host would: a poisoned answer shows.
type echoOrigin struct {
	mu     sync.Mutex
	counts map[string]int
}

func (o *echoOrigin) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	o.mu.Lock()
	o.counts[r.URL.Path]++
	o.mu.Unlock()
	host := r.Host
	if fh := r.Header.Get("X-Forwarded-Host"); fh != "" {
		host = fh
	}
	w.Header().Set("Cache-Control", "public, max-age=3600")
	fmt.Fprintf(w, "page of %s at https://%s/", r.URL.Path, host)
}

func (o *echoOrigin) count(path string) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.counts[path]
}

// TestHostilePeersAreRefused attacks a node's peer port the ways someone
// on the cluster network could: plain HTTP/1.1 and h2c with the hop
// marker, mutual TLS (over HTTP/2 and over the keep-alive HTTP/1.1 class)
// with a certificate of the cluster CA for an id that is no member, and
// one of another CA naming a member. Each is refused;
// nothing they send is stored, no key is dropped, and clients keep
// getting the origin's bytes.
func TestHostilePeersAreRefused(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ca := newTestCA(t, "cluster CA")
	origin := &echoOrigin{counts: map[string]int{}}
	c := startClusterWith(t, ctx, clusterConfig{nodes: 2, origin: origin, nodeArgs: func(i int) []string {
		cert, key := ca.issue(t, fmt.Sprintf("node-%d", i))
		return []string{"--peer-cert", cert, "--peer-key", key, "--peer-ca", ca.file, "--hot-threshold", "-1"}
	}})
	rg, err := ring.New(1, []ring.Member{{ID: "node-1"}, {ID: "node-2"}})
	if err != nil {
		t.Fatal(err)
	}
	// Paths node-2 owns; clients ask node-1, which relays over mutual TLS.
	var kept, target string
	for i := 0; kept == "" || target == ""; i++ {
		p := fmt.Sprintf("/page/%d", i)
		if rg.Owner("http127.0.0.1"+p).ID != "node-2" {
			continue
		}
		if kept == "" {
			kept = p
		} else {
			target = p
		}
	}
	owner := c.nodes[1]
	client := &http.Client{}
	fetchBody := func(path string) (string, string) {
		t.Helper()
		resp, err := client.Get("http://" + c.nodes[0].client + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 {
			t.Fatalf("GET %s: %d %s", path, resp.StatusCode, b)
		}
		return resp.Header.Get("X-Cache"), string(b)
	}
	if cache, _ := fetchBody(kept); cache != "MISS" {
		t.Fatalf("first GET %s: %s, want MISS", kept, cache)
	}

	poison := func(req *http.Request, path string, extra ...string) {
		req.Header.Set("X-Shardcache-Hop", "node-1")
		req.Header.Set("X-Shardcache-Scheme", "http")
		req.Header.Set("X-Forwarded-Host", "evil.example")
		for i := 0; i < len(extra); i += 2 {
			req.Header.Set(extra[i], extra[i+1])
		}
		req.Host = "127.0.0.1"
	}
	attack := func(name string, hc *http.Client, scheme, path string, extra ...string) {
		req, _ := http.NewRequestWithContext(ctx, "GET", scheme+"://"+owner.peer+path, nil)
		poison(req, path, extra...)
		resp, err := hc.Do(req)
		if err != nil {
			t.Logf("%s: refused at the connection: %v", name, err)
			return
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode < 400 {
			t.Fatalf("%s: %d %s; want a refusal", name, resp.StatusCode, b)
		}
		if strings.HasSuffix(name, "over HTTP/1.1") && resp.ProtoMajor != 1 {
			t.Fatalf("%s: answered over %s", name, resp.Proto)
		}
		t.Logf("%s: %d %s over %s", name, resp.StatusCode, strings.TrimSpace(string(b)), resp.Proto)
	}
	h2c := new(http.Protocols)
	h2c.SetUnencryptedHTTP2(true)
	roots := x509.NewCertPool()
	roots.AddCert(ca.cert)
	tlsClient := func(h2 bool, certFile, keyFile string) *http.Client {
		cert, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			t.Fatal(err)
		}
		return &http.Client{Transport: &http.Transport{ForceAttemptHTTP2: h2, TLSClientConfig: &tls.Config{
			Certificates: []tls.Certificate{cert}, RootCAs: roots, ServerName: "node-2", MinVersion: tls.VersionTLS12}}}
	}
	other := newTestCA(t, "another CA")
	for _, path := range []string{target, kept} {
		extra := []string{}
		if path == kept {
			extra = []string{"X-Shardcache-Invalidate", "1"}
		}
		attack("plain HTTP/1.1", &http.Client{}, "http", path, extra...)
		attack("h2c", &http.Client{Transport: &http.Transport{Protocols: h2c}}, "http", path, extra...)
		for _, h2 := range []bool{true, false} {
			proto := map[bool]string{true: "HTTP/2", false: "HTTP/1.1"}[h2]
			mallory, mKey := ca.issue(t, "mallory")
			foreign, fKey := other.issue(t, "node-1")
			attack("the cluster CA's certificate for a non-member over "+proto, tlsClient(h2, mallory, mKey), "https", path, extra...)
			attack("another CA's certificate naming node-1 over "+proto, tlsClient(h2, foreign, fKey), "https", path, extra...)
		}
	}
	if v := metric(t, owner, "shardcache_peer_refused_total", `reason="not_a_member"`); v != 4 {
		t.Fatalf("node-2 refused %v requests as not from a member, want 4 (2 over each protocol)", v)
	}
	if n := origin.count(target); n != 0 {
		t.Fatalf("the attacks reached the origin %d times", n)
	}
	cache, body := fetchBody(target)
	if cache != "MISS" || strings.Contains(body, "evil.example") {
		t.Fatalf("after the attacks GET %s: %s %q; want a MISS with the origin's own page", target, cache, body)
	}
	if cache, _ := fetchBody(kept); cache != "HIT" || origin.count(kept) != 1 {
		t.Fatalf("after the invalidation attempts GET %s: %s, %d origin requests; want the stored HIT", kept, cache, origin.count(kept))
	}
	// The nodes were given the join token as a flag; the command line
	// pprof shows (with the admin token) never carries it.
	req, _ := http.NewRequest("GET", "http://"+owner.ops+"/debug/pprof/cmdline", nil)
	req.Header.Set("Authorization", "Bearer "+c.token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || strings.Contains(string(b), "e2e-join") || !strings.Contains(string(b), "REDACTED") {
		t.Fatalf("/debug/pprof/cmdline: %d %q; want the command line with the join token redacted", resp.StatusCode, b)
	}
}

// A node asked to listen for peers off loopback without certificates
// refuses to start, naming the flags; it never binds anything.
func TestANodeOffLoopbackWithoutCertificatesRefusesToStart(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(binDir, "shardcache"), "node", "--id", "node-x", "--client", freeAddr(t),
		"--peer", "10.255.255.1:9080", "--ops", freeAddr(t), "--control-plane", "127.0.0.1:1", "--origin", "http://127.0.0.1:1")
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() == 0 {
		t.Fatalf("the node started (or failed otherwise: %v): %s", err, out)
	}
	for _, want := range []string{"not on a loopback address", "--peer-certs-from-control-plane", "--insecure-peer-hop"} {
		if !strings.Contains(string(out), want) {
			t.Fatalf("the refusal does not say %q: %s", want, out)
		}
	}
}
