// Package relay is the peer hop: a node that does not own a key forwards the
// request to the owner's peer listener over HTTP/2 without TLS (h2c, prior
// knowledge). One connection per peer pair carries every relayed request as
// its own stream, so the hop never pays a TCP handshake per request — the
// defect of relays built on nginx's default "Connection: close".
package relay

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptrace"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/shardcache/shardcache/dataplane/hop"
)

// Config tunes the peer transport. Zero values mean the defaults.
type Config struct {
	// DialTimeout bounds connecting to a peer. Default 2s.
	DialTimeout time.Duration
	// PingTimeout is how long a silent peer connection may stay unanswered
	// to a health ping before it is closed. Default 2s.
	PingTimeout time.Duration
	// OnConn is called for every relayed request with whether its
	// connection was reused from the pool.
	OnConn func(reused bool)
	// TLS, when set, makes the hop HTTP/2 over mutual TLS: the client
	// presents TLS.Certificates and verifies the peer's certificate against
	// TLS.RootCAs for the member id PeerID gives for the peer's address, so a
	// peer holding another member's certificate is refused. There is no mode
	// that skips verification.
	TLS *tls.Config
	// Roots, when set, gives the CA pool to verify peers against at each
	// dial, for a CA that arrives or changes while the node runs.
	Roots  func() *x509.CertPool
	PeerID func(addr string) (id string, ok bool)
	// Wrap, when set, wraps the hop's transport (to trace relayed requests).
	Wrap func(http.RoundTripper) http.RoundTripper
}

// ErrPeerDown is returned without trying while a peer's circuit is open.
var ErrPeerDown = errors.New("relay: peer marked down after repeated failures")

// ErrRefused is returned when a peer refused the request unserved (its
// answer carries hop.RefusedField): this node is not one of its members yet,
// or no longer. The peer is not down.
var ErrRefused = errors.New("relay: the peer refused the request")

// ErrHeaderTooLarge is returned, without trying, for a request whose header
// is larger than a peer listener takes (MaxHeaderList): the request's
// fault, not the peer's.
var ErrHeaderTooLarge = errors.New("relay: the request's header is larger than the peer hop takes")

// MaxHeaderList bounds a relayed request's header as HTTP/2 counts it
// (RFC 9113 6.5.2: each field's name and value and 32 bytes): the peer
// listener's limit. It is well above what the client listener takes
// (64 KiB of header, whatever its number of fields), with room for the
// fields a node adds.
const MaxHeaderList = 1 << 20

// Circuit breaker settings: after breakerFailures failures in a row a peer is
// skipped for breakerOpen, then tried again (one success closes it).
const (
	breakerFailures = 3
	breakerOpen     = 5 * time.Second
)

// breaker counts a peer's consecutive failures.
type breaker struct {
	failures  atomic.Int32
	openUntil atomic.Int64 // UnixNano
}

// Client sends relayed requests. It is safe for concurrent use.
type Client struct {
	scheme   string
	hc       *http.Client
	onConn   func(bool)
	breakers sync.Map // peer address -> *breaker
	now      func() time.Time
}

// New returns a client with its own connection pool.
func New(cfg Config) *Client {
	if cfg.DialTimeout == 0 {
		cfg.DialTimeout = 2 * time.Second
	}
	if cfg.PingTimeout == 0 {
		cfg.PingTimeout = 2 * time.Second
	}
	tr := &http.Transport{
		Protocols:   Protocols(false),
		DialContext: (&net.Dialer{Timeout: cfg.DialTimeout, KeepAlive: 30 * time.Second}).DialContext,
		HTTP2: &http.HTTP2Config{
			// Ping an idle-looking connection so a peer that vanished
			// (SIGKILL, SIGSTOP, partition) is noticed within seconds, before
			// requests queue on it.
			SendPingTimeout: 2 * time.Second,
			PingTimeout:     cfg.PingTimeout,
			// Bulk bodies: frames up to 1 MiB. The windows bound what a
			// stalled reader of a relayed body holds: 4 MiB a stream,
			// 32 MiB a connection.
			MaxReadFrameSize:              1 << 20,
			MaxReceiveBufferPerStream:     4 << 20,
			MaxReceiveBufferPerConnection: 32 << 20,
		},
		IdleConnTimeout:    5 * time.Minute,
		DisableCompression: true, // bodies pass through as the origin sent them
	}
	scheme := "http"
	if cfg.TLS != nil {
		scheme = "https"
		p := new(http.Protocols)
		p.SetHTTP2(true)
		tr.Protocols = p
		dialer := &net.Dialer{Timeout: cfg.DialTimeout, KeepAlive: 30 * time.Second}
		tr.DialTLSContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
			id, ok := cfg.PeerID(addr)
			if !ok {
				return nil, fmt.Errorf("relay: %s is no member's peer address", addr)
			}
			conf := cfg.TLS.Clone()
			if cfg.Roots != nil {
				conf.RootCAs = cfg.Roots()
			}
			conf.ServerName = id // the certificate must name the member we mean to reach
			conf.NextProtos = []string{"h2", "http/1.1"}
			return (&tls.Dialer{NetDialer: dialer, Config: conf}).DialContext(ctx, network, addr)
		}
	}
	var rt http.RoundTripper = tr
	if cfg.Wrap != nil {
		rt = cfg.Wrap(tr)
	}
	return &Client{
		scheme: scheme,
		hc: &http.Client{
			Transport: rt,
			// A redirect from the owner is the client's to follow.
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		},
		onConn: cfg.OnConn,
		now:    time.Now,
	}
}

// Ring tells the client the peer addresses of a new ring epoch. A peer
// that joined the ring with it (joined) has just opened a session with the
// control plane: fresher news than the failures that marked it down while
// it was away, so its breaker closes. The breakers of addresses no longer
// in the ring are dropped: there are never more than the ring has peers,
// beside those tried since.
func (c *Client) Ring(peers, joined []string) {
	for _, a := range joined {
		c.breakers.Delete(a)
	}
	c.breakers.Range(func(k, _ any) bool {
		if !slices.Contains(peers, k.(string)) {
			c.breakers.Delete(k)
		}
		return true
	})
}

func (c *Client) breaker(peer string) *breaker {
	b, _ := c.breakers.LoadOrStore(peer, &breaker{})
	return b.(*breaker)
}

// Protocols returns the protocols of the peer hop without TLS: h2c only
// for the client; for the peer listener also HTTP/1.1, on which it serves
// nothing but the refusal (505) that tells a probe why.
func Protocols(server bool) *http.Protocols {
	p := new(http.Protocols)
	p.SetUnencryptedHTTP2(true)
	p.SetHTTP1(server)
	return p
}

// Forward relays r to the peer listener at peerAddr. header replaces the
// outgoing header (the caller builds it, hop marker included). The caller
// closes the response body.
//
// A peer that failed breakerFailures times in a row is not tried for
// breakerOpen: Forward returns ErrPeerDown at once, so a dead or partitioned
// owner does not cost every request a dial timeout.
//
// Only a failure of the peer counts towards its breaker: one to reach it,
// or one after the request's header went out. A request that could not be
// sent as it is (a header too large, a field HTTP/2 does not carry) is its
// sender's error and leaves the peer's record alone.
func (c *Client) Forward(ctx context.Context, peerAddr string, r *http.Request, header http.Header) (*http.Response, error) {
	if headerListSize(r, header) > MaxHeaderList {
		return nil, fmt.Errorf("relay to %s: %w", peerAddr, ErrHeaderTooLarge)
	}
	b := c.breaker(peerAddr)
	if c.now().UnixNano() < b.openUntil.Load() {
		return nil, fmt.Errorf("relay to %s: %w", peerAddr, ErrPeerDown)
	}
	var reached, sent atomic.Bool
	ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		GotConn: func(info httptrace.GotConnInfo) {
			reached.Store(true)
			if c.onConn != nil {
				c.onConn(info.Reused)
			}
		},
		WroteHeaders: func() { sent.Store(true) },
	})
	resp, err := c.forward(ctx, peerAddr, r, header)
	if err != nil {
		peerFault := !reached.Load() || sent.Load()
		if ctx.Err() == nil && peerFault && b.failures.Add(1) >= breakerFailures {
			b.openUntil.Store(c.now().Add(breakerOpen).UnixNano())
		}
		return nil, err
	}
	b.failures.Store(0)
	if why := resp.Header.Get(hop.RefusedField); why != "" {
		resp.Body.Close()
		return nil, fmt.Errorf("relay to %s: %w (%s, %s)", peerAddr, ErrRefused, resp.Status, why)
	}
	return resp, nil
}

// headerListSize is the size of a relayed request's header as HTTP/2
// counts it against the peer's limit, pseudo-header fields included.
func headerListSize(r *http.Request, h http.Header) int {
	n := len(":method") + len(r.Method) + len(":path") + len(r.URL.RequestURI()) + len(":authority") + len(r.Host) + len(":scheme") + 5 + 4*32
	for k, vs := range h {
		for _, v := range vs {
			n += len(k) + len(v) + 32
		}
	}
	return n
}

func (c *Client) forward(ctx context.Context, peerAddr string, r *http.Request, header http.Header) (*http.Response, error) {
	out, err := http.NewRequestWithContext(ctx, r.Method, c.scheme+"://"+peerAddr+r.URL.RequestURI(), nil)
	if err != nil {
		return nil, fmt.Errorf("relay to %s: %w", peerAddr, err)
	}
	out.Host = r.Host
	out.Header = header
	resp, err := c.hc.Do(out)
	if err != nil {
		return nil, fmt.Errorf("relay to %s: %w", peerAddr, err)
	}
	return resp, nil
}

// ServerTLS returns the peer listener's TLS configuration: base's
// certificate, and a client certificate signed by base.ClientCAs required of
// every caller (a node of the cluster).
func ServerTLS(base *tls.Config) *tls.Config {
	conf := base.Clone()
	conf.ClientAuth = tls.RequireAndVerifyClientCert
	conf.NextProtos = []string{"h2", "http/1.1"}
	return conf
}

// ServerProtocols are the peer listener's protocols over TLS: HTTP/2, and
// HTTP/1.1 for the refusal only (see Protocols).
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

// CloseIdle closes pooled connections that carry no request.
func (c *Client) CloseIdle() { c.hc.CloseIdleConnections() }

// PeerServerHTTP2 is the peer listener's HTTP/2 configuration: many
// concurrent relays on one connection. (Bulk answers flow at the
// client's frame size and windows, set in New.)
func PeerServerHTTP2() *http.HTTP2Config {
	return &http.HTTP2Config{MaxConcurrentStreams: 1000}
}
