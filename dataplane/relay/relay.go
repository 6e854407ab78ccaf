// Package relay is the peer hop: a node that does not own a key forwards the
// request to the owner's peer listener, in plain text on loopback (or when
// told the network is trusted), else over mutual TLS. Two classes of
// connection carry it, neither paying a TCP or TLS handshake per request
// (the defect of relays built on nginx's default "Connection: close"):
//
//   - keep-alive HTTP/1.1 connections, up to MaxConnsPerPeer to each peer,
//     each carrying one exchange at a time, written and read by the
//     relaying goroutine itself (pool.go, h1.go): a relayed request costs a
//     round-trip. A node uses them over mutual TLS only: its peer listener
//     serves HTTP/1.1 in plain text to no one (front.ServePeer);
//   - one multiplexed HTTP/2 connection to each peer, for the requests
//     that find every keep-alive connection busy: past the bound a request
//     never queues, it takes a stream.
package relay

import (
	"bufio"
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
	"github.com/shardcache/shardcache/dataplane/internal/rawio"
)

// Config tunes the peer transport. Zero values mean the defaults.
type Config struct {
	// DialTimeout bounds connecting to a peer. Default 2s.
	DialTimeout time.Duration
	// PingTimeout is how long a silent peer may leave a health check
	// unanswered (an HTTP/2 ping, or the keep-alive class's probe, see
	// health.go) before its connections are closed. Default 2s.
	PingTimeout time.Duration
	// MaxConnsPerPeer bounds the keep-alive HTTP/1.1 connections to one
	// peer, busy or idle. A request that finds them all busy rides the
	// peer's HTTP/2 connection. Default 64; negative: no keep-alive
	// class, every relay over HTTP/2 (a node's plain-text hop).
	MaxConnsPerPeer int
	// IdleTimeout closes a keep-alive connection idle this long (the
	// peer listener keeps one ten minutes). Default 90s.
	IdleTimeout time.Duration
	// OnConn is called for every relayed request with whether its
	// connection was reused from the pool.
	OnConn func(reused bool)
	// TLS, when set, makes the hop mutual TLS: the client presents
	// TLS.Certificates and verifies the peer's certificate against
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

// Defaults of Config.
const (
	defaultMaxConnsPerPeer = 64
	defaultIdleTimeout     = 90 * time.Second
	// probeAfter is how long an exchange on a keep-alive connection
	// waits for its answer's first byte before the peer is probed, as
	// long as the HTTP/2 class waits on a silent connection to ping it.
	probeAfter = 2 * time.Second
)

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

// ErrHeaderInvalid is returned, without trying, for a request with a
// field the hop does not carry: a connection-specific one (RFC 9110
// 7.6.1, RFC 9113 8.2.2) or one whose name or value is not a valid field.
// The request's fault, not the peer's.
var ErrHeaderInvalid = errors.New("relay: the request has a header field the peer hop does not carry")

// MaxHeaderList bounds a relayed request's header as HTTP/2 counts it
// (RFC 9113 6.5.2: each field's name and value and 32 bytes): the peer
// listener's limit, over either protocol (HTTP/1.1 counts less: no 32
// bytes a field). It is well above what the client listener takes
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

// Client sends relayed requests. It is safe for concurrent use. Close
// stops it.
type Client struct {
	scheme   string
	rt       http.RoundTripper // the two classes, wrapped
	h2       *http.Transport   // the multiplexed class
	pools    *pools            // the keep-alive class; nil: none
	dialH1   func(ctx context.Context, addr string) (net.Conn, error)
	onConn   func(bool)
	breakers sync.Map // peer address -> *breaker
	// h2Only holds the peers that answered HTTP/1.1 with the refusal of
	// peer listeners that serve HTTP/2 alone (an older version, during a
	// rolling upgrade): relayed to over HTTP/2 until they join a ring anew.
	h2Only sync.Map // peer address -> struct{}
	now    func() time.Time

	pingTimeout time.Duration
	probeFailed atomic.Int64 // health probes a peer left unanswered

	ctx    context.Context // ended by Close: health probes stop
	cancel context.CancelFunc
	probes sync.WaitGroup
}

// New returns a client with its own connections.
func New(cfg Config) *Client {
	if cfg.DialTimeout == 0 {
		cfg.DialTimeout = 2 * time.Second
	}
	if cfg.PingTimeout == 0 {
		cfg.PingTimeout = 2 * time.Second
	}
	if cfg.MaxConnsPerPeer == 0 {
		cfg.MaxConnsPerPeer = defaultMaxConnsPerPeer
	}
	if cfg.IdleTimeout == 0 {
		cfg.IdleTimeout = defaultIdleTimeout
	}
	dialer := &net.Dialer{Timeout: cfg.DialTimeout, KeepAlive: 30 * time.Second}
	dial := rawio.Dial(dialer)
	c := &Client{scheme: "http", onConn: cfg.OnConn, now: time.Now, pingTimeout: cfg.PingTimeout}
	c.ctx, c.cancel = context.WithCancel(context.Background())
	c.h2 = &http.Transport{
		Protocols:   Protocols(false),
		DialContext: dial,
		HTTP2: &http.HTTP2Config{
			// Ping an idle-looking connection so a peer that vanished
			// (SIGKILL, SIGSTOP, partition) is noticed within seconds, before
			// requests queue on it.
			SendPingTimeout: probeAfter,
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
	dialH1 := dial
	if cfg.TLS != nil {
		c.scheme = "https"
		p := new(http.Protocols)
		p.SetHTTP2(true)
		c.h2.Protocols = p
		c.h2.DialTLSContext = tlsDialer(cfg, dialer, "h2")
		dialH1 = tlsDialer(cfg, dialer, "http/1.1")
	}
	c.dialH1 = func(ctx context.Context, addr string) (net.Conn, error) { return dialH1(ctx, "tcp", addr) }
	if cfg.MaxConnsPerPeer > 0 {
		c.pools = newPools(cfg.MaxConnsPerPeer, cfg.IdleTimeout, c.dialH1, c.silent)
	}
	c.rt = classes{c}
	if cfg.Wrap != nil {
		c.rt = cfg.Wrap(c.rt)
	}
	return c
}

// tlsDialer dials a peer over mutual TLS offering protocol proto alone:
// the peer's certificate must name the member the epoch says listens at
// the address.
func tlsDialer(cfg Config, dialer *net.Dialer, proto string) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		id, ok := cfg.PeerID(addr)
		if !ok {
			return nil, fmt.Errorf("relay: %s is no member's peer address", addr)
		}
		conf := cfg.TLS.Clone()
		if cfg.Roots != nil {
			conf.RootCAs = cfg.Roots()
		}
		conf.ServerName = id // the certificate must name the member we mean to reach
		conf.NextProtos = []string{proto}
		ctx, cancel := context.WithTimeout(ctx, dialer.Timeout) // for the connection and its handshake, as tls.Dialer
		defer cancel()
		raw, err := dialer.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		raw = rawio.Wrap(raw)
		tc := tls.Client(&readAhead{Conn: raw, r: bufio.NewReaderSize(raw, readAheadSize)}, conf)
		if err := tc.HandshakeContext(ctx); err != nil {
			raw.Close()
			return nil, err
		}
		return tc, nil
	}
}

// readAheadSize is what a TLS connection to a peer reads at once: crypto/tls
// asks its connection for a record at a time, and a bulk body arriving in
// a few large writes (BulkConn) is then read in as few system calls.
const readAheadSize = 64 << 10

// readAhead is a connection read through a buffer.
type readAhead struct {
	net.Conn
	r *bufio.Reader
}

func (c *readAhead) Read(p []byte) (int, error) { return c.r.Read(p) }

// classes is the hop's transport: a keep-alive connection when one is
// free or may be opened, else a stream of the HTTP/2 connection.
type classes struct{ c *Client }

func (t classes) RoundTrip(req *http.Request) (*http.Response, error) {
	c := t.c
	if _, old := c.h2Only.Load(req.URL.Host); c.pools != nil && !old {
		resp, err := c.roundTripH1(req)
		if !errors.Is(err, errAtBound) {
			if err != nil || !refusesHTTP1(resp) {
				return resp, err
			}
			resp.Body.Close()
			c.h2Only.Store(req.URL.Host, struct{}{})
		}
	}
	return c.h2.RoundTrip(req)
}

// refusesHTTP1 reports whether resp is the refusal of a peer listener
// that serves HTTP/2 alone.
func refusesHTTP1(resp *http.Response) bool {
	return resp.StatusCode == http.StatusHTTPVersionNotSupported && resp.Header.Get(hop.RefusedField) == "http1"
}

// Ring tells the client the peer addresses of a new ring epoch. A peer
// that joined the ring with it (joined) has just opened a session with the
// control plane: fresher news than the failures that marked it down while
// it was away, so its breaker closes (and it may have been upgraded: it
// is tried on HTTP/1.1 again). The breakers and connections of addresses
// no longer in the ring are dropped: there are never more than the ring
// has peers, beside those tried since.
func (c *Client) Ring(peers, joined []string) {
	for _, a := range joined {
		c.breakers.Delete(a)
		c.h2Only.Delete(a)
	}
	for _, m := range []*sync.Map{&c.breakers, &c.h2Only} {
		m.Range(func(k, _ any) bool {
			if !slices.Contains(peers, k.(string)) {
				m.Delete(k)
			}
			return true
		})
	}
	if c.pools != nil {
		c.pools.keep(func(addr string) bool { return slices.Contains(peers, addr) })
	}
}

func (c *Client) breaker(peer string) *breaker {
	if b, ok := c.breakers.Load(peer); ok {
		return b.(*breaker)
	}
	b, _ := c.breakers.LoadOrStore(peer, &breaker{})
	return b.(*breaker)
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
// sent as it is (a header too large, a field the hop does not carry) is
// its sender's error and leaves the peer's record alone.
func (c *Client) Forward(ctx context.Context, peerAddr string, r *http.Request, header http.Header) (*http.Response, error) {
	if headerListSize(r, header) > MaxHeaderList {
		return nil, fmt.Errorf("relay to %s: %w", peerAddr, ErrHeaderTooLarge)
	}
	if err := checkHeader(r.Host, header); err != nil {
		return nil, fmt.Errorf("relay to %s: %w", peerAddr, err)
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
	u := *r.URL
	u.Scheme, u.Host, u.User, u.Fragment, u.RawFragment = c.scheme, peerAddr, nil, "", ""
	out := (&http.Request{Method: r.Method, URL: &u, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: header, Host: r.Host}).WithContext(ctx)
	resp, err := c.rt.RoundTrip(out)
	if err != nil {
		return nil, fmt.Errorf("relay to %s: %w", peerAddr, err)
	}
	return resp, nil
}

// CloseIdle closes pooled connections that carry no request.
func (c *Client) CloseIdle() {
	c.h2.CloseIdleConnections()
	if c.pools != nil {
		c.pools.closeIdle()
	}
}

// Close stops the health probes and closes the idle connections;
// relayed answers still being read end as they end.
func (c *Client) Close() {
	c.cancel()
	c.probes.Wait()
	c.CloseIdle()
}
