package dataplane

import (
	"crypto/x509"
	"log/slog"
	"net/http"
	"time"

	"github.com/shardcache/shardcache/dataplane/internal/tracing"
	"github.com/shardcache/shardcache/dataplane/relay"
)

// peerHop sets up the relay to peers and the peer listener's TLS: from
// files, issued by the control plane (csr is then the request for it), or
// none.
func (n *Node) peerHop() (csr []byte, err error) {
	if f := n.cfg.PeerTLS; f.enabled() {
		peerTLS, err := relay.LoadTLS(f.CertFile, f.KeyFile, f.CAFile, n.cfg.ID)
		if err != nil {
			return nil, err
		}
		n.peerTLS, n.serverTLS = peerTLS, relay.ServerTLS(peerTLS)
	}
	var roots func() *x509.CertPool
	if n.cfg.PeerCertsFromControlPlane {
		if n.certs, err = relay.NewCerts(n.cfg.ID); err != nil {
			return nil, err
		}
		n.peerTLS, n.serverTLS, roots, csr = n.certs.ClientTLS(), n.certs.ServerTLS(), n.certs.Roots, n.certs.CSR()
	}
	n.peers = n.peerClient(roots)
	return csr, nil
}

// peerClient is the hop's client, over mutual TLS when configured (roots:
// a CA that may change while the node runs). The keep-alive HTTP/1.1
// class goes over mutual TLS alone: in plain text peer listeners serve
// h2c only (front.ServePeer), so every relay rides HTTP/2.
func (n *Node) peerClient(roots func() *x509.CertPool) *relay.Client {
	keepAlive := 0 // relay's default bound
	if n.peerTLS == nil {
		keepAlive = -1
	}
	return relay.New(relay.Config{
		OnConn:          n.metrics.PeerConn,
		MaxConnsPerPeer: keepAlive,
		TLS:             n.peerTLS,
		Roots:           roots,
		PeerID:          n.peerID,
		Wrap: func(rt http.RoundTripper) http.RoundTripper {
			return tracing.Transport(n.cfg.TracerProvider, rt, "relay")
		},
	})
}

// peerServer is the peer listener's server: h2c, or over mutual TLS when
// configured, HTTP/2 and keep-alive HTTP/1.1 (package relay's two classes;
// front.ServePeer checks every request alike, and refuses HTTP/1.1 in
// plain text).
func (n *Node) peerServer() server {
	handler := tracing.Handler(n.cfg.TracerProvider, http.HandlerFunc(n.front.ServePeer), "shardcache.peer", n.front.PeerTrusted)
	s := &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 10 * time.Minute,
		MaxHeaderBytes: relay.MaxHeaderList, Protocols: relay.Protocols(true), HTTP2: relay.PeerServerHTTP2(),
		ErrorLog: slog.NewLogLogger(n.log.Handler(), slog.LevelDebug)}
	if n.serverTLS == nil {
		return servePlain{s}
	}
	return relay.NewTLSServer(s, n.serverTLS, n.log)
}
