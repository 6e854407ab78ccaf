package relay

import (
	"crypto/tls"
	"crypto/x509"
	"net/http"
)

// Protocols returns the protocols of the peer hop without TLS: h2c only
// for the client; for the peer listener also HTTP/1.1, on which a node
// serves nothing but the refusal (505) that tells a caller why: the
// keep-alive class is for mutual TLS alone.
func Protocols(server bool) *http.Protocols {
	p := new(http.Protocols)
	p.SetUnencryptedHTTP2(true)
	p.SetHTTP1(server)
	return p
}

// ServerTLS returns the peer listener's TLS configuration: base's
// certificate, and a client certificate signed by base.ClientCAs required of
// every caller (a node of the cluster), over either class.
func ServerTLS(base *tls.Config) *tls.Config {
	conf := base.Clone()
	conf.ClientAuth = tls.RequireAndVerifyClientCert
	conf.NextProtos = []string{"h2", "http/1.1"}
	return conf
}

// ServerProtocols are the peer listener's protocols over TLS: HTTP/2 and
// HTTP/1.1, the two classes.
func ServerProtocols() *http.Protocols {
	p := new(http.Protocols)
	p.SetHTTP1(true)
	p.SetHTTP2(true)
	return p
}

// Identity is the member id a node certificate names: its first DNS name,
// else its common name.
func Identity(cert *x509.Certificate) string {
	if len(cert.DNSNames) > 0 {
		return cert.DNSNames[0]
	}
	return cert.Subject.CommonName
}

// PeerServerHTTP2 is the peer listener's HTTP/2 configuration: many
// concurrent relays on one connection. (Bulk answers flow at the
// client's frame size and windows, set in New.)
func PeerServerHTTP2() *http.HTTP2Config {
	return &http.HTTP2Config{MaxConcurrentStreams: 1000}
}
