package h1

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// storedBody is a file as the store hands one out: a descriptor behind a
// type of its own. It counts the reads made through it.
type storedBody struct {
	f     *os.File
	reads int
}

func (b *storedBody) Read(p []byte) (int, error)            { b.reads++; return b.f.Read(p) }
func (b *storedBody) SyscallConn() (syscall.RawConn, error) { return b.f.SyscallConn() }

// selfSigned is a certificate for 127.0.0.1, and a pool trusting it.
func selfSigned(t *testing.T) (tls.Certificate, *x509.CertPool) {
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "h1 test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, pool
}

// Over TLS a request carries its connection's TLS state, and a file the
// connection cannot send by sendfile goes out in large writes as it is
// read, not 16 KiB at a time as a stream does; over plain TCP the same
// file goes by sendfile, never through its Read.
func TestFilesAndTLSState(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f")
	content := bytes.Repeat([]byte("0123456789abcdef"), 256<<10) // 4 MiB
	if err := os.WriteFile(path, content, 0o600); err != nil {
		t.Fatal(err)
	}
	// What the handler saw, sent once it returns: the client may have
	// read the whole answer before then.
	type seen struct {
		reads int
		state *tls.ConnectionState
	}
	handled := make(chan seen, 1)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f, err := os.Open(path)
		if err != nil {
			panic(err)
		}
		defer f.Close()
		body := &storedBody{f: f}
		defer func() { handled <- seen{body.reads, r.TLS} }()
		w.Header().Set("Content-Length", fmt.Sprint(len(content)))
		io.Copy(w, &io.LimitedReader{R: body, N: int64(len(content))})
	})
	cert, pool := selfSigned(t)
	for _, overTLS := range []bool{false, true} {
		addr, _ := serve(t, h)
		tr := &http.Transport{}
		if overTLS {
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			s := New(Config{Handler: h})
			go s.Serve(tls.NewListener(l, &tls.Config{Certificates: []tls.Certificate{cert}}))
			t.Cleanup(func() { s.Close() })
			addr = l.Addr().String()
			tr.TLSClientConfig = &tls.Config{RootCAs: pool}
		}
		scheme := map[bool]string{false: "http", true: "https"}[overTLS]
		resp, err := (&http.Client{Transport: tr}).Get(scheme + "://" + addr + "/f")
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		tr.CloseIdleConnections()
		if err != nil || !bytes.Equal(b, content) {
			t.Fatalf("over TLS %v: read %d of %d bytes (%v)", overTLS, len(b), len(content), err)
		}
		got := <-handled
		reads, state := got.reads, got.state
		switch {
		case !overTLS && (state != nil || reads != 0):
			t.Errorf("plain: TLS state %v, %d reads of the file; want none (sendfile)", state, reads)
		case overTLS && (state == nil || !state.HandshakeComplete):
			t.Errorf("over TLS: the request's TLS state is %v", state)
		case overTLS && reads > len(content)/fileChunk+2:
			t.Errorf("over TLS: the file was read in %d reads, want about %d (chunks of %d)", reads, len(content)/fileChunk, fileChunk)
		}
	}
}
