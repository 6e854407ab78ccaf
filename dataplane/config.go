package dataplane

import (
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"net/url"
	"regexp"
	"strings"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/shardcache/shardcache/sdk/loopback"
)

// Config configures a cache node. Zero values mean the documented default;
// New fills them in.
type Config struct {
	// ID is the node's stable id, hashed by the ring (the StatefulSet pod
	// name in Kubernetes). Required.
	ID string
	// ClientAddr is host:port of the client HTTP listener. Default "127.0.0.1:8081".
	ClientAddr string
	// PeerAddr is host:port of the peer listener, which only accepts
	// requests relayed by other nodes. Default "127.0.0.1:9081".
	PeerAddr string
	// OpsAddr is host:port of the ops listener (/healthz, /readyz, /metrics,
	// /debug/pprof). Default "127.0.0.1:9191".
	OpsAddr string
	// AdvertisePeerAddr is the peer address other nodes dial. Default PeerAddr.
	AdvertisePeerAddr string
	// OpsURL is the ops listener's base URL as cachectl reaches it.
	// Default http://<OpsAddr>.
	OpsURL string
	// PublicURL is the client-facing base URL of this node. Default
	// "http://" + ClientAddr.
	PublicURL string
	// Zone is the node's failure domain, reported to the control plane.
	Zone string
	// Weight is the node's relative share of keys. Default 1.
	Weight uint32

	// ControlPlane is host:port of a control-plane replica, or several
	// separated by commas, tried in turn on reconnect. Required.
	ControlPlane string
	// Origin is the base URL requests are fetched from (scheme and host;
	// the request's path and query are appended) when the request's policy
	// names none. Required.
	Origin string
	// JoinToken is the secret the control plane requires of joining nodes, if any.
	JoinToken string
	// ControlPlaneTLS, when set, connects to the control plane over TLS.
	ControlPlaneTLS *tls.Config
	// InsecureControlPlane connects without TLS to a control plane that is
	// not on a loopback address. Without it such a node refuses to start:
	// its join token, its admin token and its certificate would cross the
	// network in cleartext, and whoever sits between could hand it a ring
	// and purges of their choosing.
	InsecureControlPlane bool
	// PeerTLS, when its files are set, makes the peer hop mutual TLS: the
	// node's certificate must name its id (first DNS name, or common name),
	// and every peer's must name the member it is reached as.
	PeerTLS PeerTLSFiles
	// PeerCertsFromControlPlane makes the peer hop mutual TLS with a
	// certificate the control plane issues for the node's id (over the
	// session, from a key that never leaves the node) and renews before it
	// expires. Not with PeerTLS files.
	PeerCertsFromControlPlane bool
	// InsecurePeerHop accepts unauthenticated peers (h2c, anyone who can
	// reach the peer listener may send the hop marker) on a peer listener
	// that is not on a loopback address. Without it such a node refuses to
	// start. With it the node warns at start and says so in /readyz and to
	// the control plane (cachectl nodes).
	InsecurePeerHop bool

	// MemoryBytes is the node's memory budget for cached objects: the memory
	// tier and, out of it, HotCopyBytes for copies of hot objects owned
	// elsewhere. Default 256 MiB.
	MemoryBytes int64
	// MemoryMaxObject is the largest stored body kept in the memory tier;
	// larger ones are served from the disk tier. Default 1 MiB.
	MemoryMaxObject int64
	// DiskBytes is the disk tier's budget. Default 10 GiB.
	DiskBytes int64
	// DiskMinFree is the free space the disk tier leaves on its file
	// system: below it, new objects are served but not stored. Default 1 GiB.
	DiskMinFree int64
	// DiskSync makes the disk tier fdatasync each write buffer it flushes
	// before the fills in it are committed (one sync per buffer, shared by
	// every fill in it), so that stored objects survive a power failure
	// (--disk-sync data).
	DiskSync bool
	// MaxObjectBytes is the largest response stored; larger ones are
	// streamed to the client without storing. Default a quarter of DiskBytes.
	MaxObjectBytes int64
	// OriginTimeout bounds one origin request, headers and body. Default 60s.
	OriginTimeout time.Duration
	// RelayTimeout bounds one relayed request to the owner. It must exceed
	// OriginTimeout, since the owner may be waiting on the origin. Default
	// OriginTimeout + 5s.
	RelayTimeout time.Duration
	// HotThreshold is the request rate, per minute at this node, above which
	// a key is hot: it gets ReplicationFactor owners and non-owners keep local
	// copies. A policy's hot_threshold overrides it. 0 means 60; negative
	// turns hot-key handling off.
	HotThreshold int
	// HandoffWindow is how long after a ring epoch change a new owner that
	// misses asks the key's owner in the previous epoch for a stored copy
	// before going to the origin. 0 means 10 minutes; negative turns
	// handoff off.
	HandoffWindow time.Duration
	// CutOffBound is how long a node cut off from the control plane goes on
	// serving what it stored as it is; past it, an object stored (or last
	// confirmed) longer ago than the bound is revalidated with the origin
	// before it is served, as a purge issued meanwhile may not have reached
	// the node. Default 30 s; negative: never.
	CutOffBound time.Duration
	// ClientHeaderTimeout bounds how long a client may take to send a
	// request's header (slow clients holding connections open). Default 10s.
	ClientHeaderTimeout time.Duration
	// ClientSendTimeout closes a client connection on which no byte of
	// an answer has been taken for this long (nginx's send_timeout): it
	// bounds waiting on a client that stopped reading, never a transfer's
	// length. On the peer hop's HTTP/2 class, a stream whose peer has
	// taken no byte of an answer for this plus RelayTimeout is reset (the
	// peer's own client may stall it this long). Default 60 s; negative:
	// none, on either listener.
	ClientSendTimeout time.Duration
	// ClientBodyTimeout bounds each wait for a client's request body to
	// bring more bytes (nginx's client_body_timeout). Default 60 s;
	// negative: none.
	ClientBodyTimeout time.Duration
	// ClientMaxConnsPerAddr bounds the connections one client address
	// holds open on the client listener (TrustedProxies are not bounded);
	// a connection past it is answered 503 and closed. Default 1024;
	// negative: no bound.
	ClientMaxConnsPerAddr int
	// PeerMaxConnsPerAddr bounds the connections one address holds open
	// on the peer listener, where members relay (each keeps a few HTTP/2
	// connections and at most 64 keep-alive ones to a peer) but so may
	// anyone reaching an h2c listener, and one member may open thousands;
	// a connection past it is closed at once, counted in
	// shardcache_peer_refused_total{reason="conns"}. Nodes sharing an
	// address (several on one host, or behind a sidecar proxy that
	// presents every peer from one address, as Istio's 127.0.0.6) share
	// the bound: 8192 holds about 120 relaying nodes at their most.
	// Default 8192; negative: no bound.
	PeerMaxConnsPerAddr int
	// DrainGrace is how long a stopping node, already out of the ring,
	// keeps serving so that its peers take its keys by handoff; it stops
	// sooner once its peer listener has been idle for a second. 0 means
	// 10 s; negative stops at once.
	DrainGrace time.Duration
	// HotCopyBytes is the part of MemoryBytes kept for copies of hot
	// objects this node does not own. Default MemoryBytes/8.
	HotCopyBytes int64
	// HotCopyMaxObject is the largest object copied locally. Default 1 MiB.
	HotCopyMaxObject int64

	// DataDir holds the node's persistent data, the disk tier among it;
	// created if missing. Empty means a temporary directory, removed when
	// the node stops: nothing is kept across restarts.
	DataDir string

	// TrustedProxies are the addresses whose X-Forwarded-For, Forwarded
	// and X-Real-IP are kept and extended; from any other address they are
	// replaced. Their traceparent is continued too (with its sampled
	// flag); any other client's request starts a trace of its own, linked
	// to the one it came with.
	TrustedProxies []netip.Prefix
	// PurgeAllow are the client addresses (after TrustedProxies) whose
	// PURGE requests need no token: they are made with AdminToken.
	PurgeAllow []netip.Prefix
	// AdminToken is the control plane's admin token, used for PURGE
	// requests from PurgeAllow. PURGE requests carrying their own
	// "Authorization: Bearer" token are made with that token instead.
	AdminToken string
	// OpsToken, when set, is a read-only token for the ops listener's
	// operator views (/stats, /inspect, /log); the AdminToken serves them
	// too, and alone serves /drain and pprof.
	OpsToken string
	// OpsTrustLoopback serves the ops listener's guarded endpoints to
	// loopback callers without a token. Off by default: in a pod, a
	// sidecar proxy's connections come from loopback too.
	OpsTrustLoopback bool
	// AccessLog receives one JSON line per client request; nil turns the
	// access log off.
	AccessLog io.Writer
	// AccessLogSample is the share of requests logged, in (0, 1]; 5xx
	// answers are always logged. Default 1.
	AccessLogSample float64

	// TracerProvider, when set, traces requests with OpenTelemetry: the
	// client request, the cache lookup, the relay and the owner's handling
	// of it, the origin fetch, with W3C traceparent on the peer hop and to
	// the origin. A client's own trace context is continued only from
	// TrustedProxies. Nil: no tracing, at no cost.
	TracerProvider trace.TracerProvider

	// Logger receives the node's logs. Default slog.Default().
	Logger *slog.Logger
}

// PeerTLSFiles names the PEM files of the peer hop's mutual TLS.
type PeerTLSFiles struct {
	CertFile, KeyFile string
	// CAFile is the cluster CA that signs every node's certificate.
	CAFile string
}

// peerHopAuthenticated reports whether peers prove who they are (mutual
// TLS).
func (c *Config) peerHopAuthenticated() bool {
	return c.PeerTLS.enabled() || c.PeerCertsFromControlPlane
}

// peerHop names how the peer hop authenticates peers, as the node reports
// it: "mtls", "loopback" or "insecure".
func (c *Config) peerHop() string {
	switch {
	case c.peerHopAuthenticated():
		return "mtls"
	case loopback.Only(c.PeerAddr):
		return "loopback"
	}
	return "insecure"
}

func (f PeerTLSFiles) enabled() bool { return f.CertFile != "" || f.KeyFile != "" || f.CAFile != "" }

// validID matches what the control plane accepts as a node id.
var validID = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9._-]{0,62}$`)

func (c *Config) setDefaults() {
	if c.ClientAddr == "" {
		c.ClientAddr = "127.0.0.1:8081"
	}
	if c.PeerAddr == "" {
		c.PeerAddr = "127.0.0.1:9081"
	}
	if c.OpsAddr == "" {
		c.OpsAddr = "127.0.0.1:9191"
	}
	if c.AdvertisePeerAddr == "" {
		c.AdvertisePeerAddr = c.PeerAddr
	}
	if c.PublicURL == "" {
		c.PublicURL = "http://" + c.ClientAddr
	}
	if c.OpsURL == "" {
		c.OpsURL = "http://" + c.OpsAddr
	}
	if c.Weight == 0 {
		c.Weight = 1
	}
	if c.MemoryBytes == 0 {
		c.MemoryBytes = 256 << 20
	}
	if c.MemoryMaxObject == 0 {
		c.MemoryMaxObject = min(1<<20, c.MemoryBytes/8)
	}
	if c.DiskBytes == 0 {
		c.DiskBytes = 10 << 30
	}
	if c.DiskMinFree == 0 {
		c.DiskMinFree = 1 << 30
	}
	if c.MaxObjectBytes == 0 {
		c.MaxObjectBytes = c.DiskBytes / 4
	}
	if c.OriginTimeout == 0 {
		c.OriginTimeout = 60 * time.Second
	}
	if c.HandoffWindow == 0 {
		c.HandoffWindow = 10 * time.Minute
	}
	if c.CutOffBound == 0 {
		c.CutOffBound = 30 * time.Second
	}
	if c.ClientHeaderTimeout == 0 {
		c.ClientHeaderTimeout = 10 * time.Second
	}
	if c.ClientSendTimeout == 0 {
		c.ClientSendTimeout = 60 * time.Second
	}
	if c.ClientBodyTimeout == 0 {
		c.ClientBodyTimeout = 60 * time.Second
	}
	if c.ClientMaxConnsPerAddr == 0 {
		c.ClientMaxConnsPerAddr = 1024
	}
	if c.PeerMaxConnsPerAddr == 0 {
		c.PeerMaxConnsPerAddr = 8192
	}
	if c.DrainGrace == 0 {
		c.DrainGrace = 10 * time.Second
	}
	if c.HotThreshold == 0 {
		c.HotThreshold = 60
	}
	if c.HotCopyBytes == 0 {
		c.HotCopyBytes = c.MemoryBytes / 8
	}
	if c.HotCopyMaxObject == 0 {
		c.HotCopyMaxObject = 1 << 20
	}
	if c.RelayTimeout == 0 {
		c.RelayTimeout = c.OriginTimeout + 5*time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.AccessLogSample == 0 {
		c.AccessLogSample = 1
	}
}

// Validate reports the first setting the node cannot run with.
func (c *Config) Validate() error {
	if !validID.MatchString(c.ID) {
		return fmt.Errorf("node id %q: use 1 to 63 letters, digits, '.', '_' or '-', starting with a letter or digit", c.ID)
	}
	addrs := []struct{ name, addr string }{
		{"client", c.ClientAddr}, {"peer", c.PeerAddr}, {"ops", c.OpsAddr}, {"advertised peer", c.AdvertisePeerAddr},
	}
	for _, cp := range strings.Split(c.ControlPlane, ",") {
		addrs = append(addrs, struct{ name, addr string }{"control plane", cp})
	}
	for _, a := range addrs {
		if a.addr == "" {
			return fmt.Errorf("%s address is empty", a.name)
		}
		if _, _, err := net.SplitHostPort(a.addr); err != nil {
			return fmt.Errorf("%s address %q: %w", a.name, a.addr, err)
		}
	}
	if c.Origin == "" {
		return errors.New("origin URL is empty")
	}
	u, err := url.Parse(c.Origin)
	if err != nil {
		return fmt.Errorf("origin URL %q: %w", c.Origin, err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("origin URL %q: want http:// or https:// and a host", c.Origin)
	}
	if _, err := url.Parse(c.PublicURL); err != nil {
		return fmt.Errorf("public URL %q: %w", c.PublicURL, err)
	}
	if c.MemoryBytes < 1<<20 {
		return fmt.Errorf("memory budget %d bytes is below 1 MiB", c.MemoryBytes)
	}
	if c.MemoryMaxObject <= 0 || c.MemoryMaxObject > c.MemoryBytes/2 {
		return fmt.Errorf("largest object in memory %d bytes must be positive and at most half the memory budget (%d)", c.MemoryMaxObject, c.MemoryBytes)
	}
	if c.DiskBytes < 1<<20 {
		return fmt.Errorf("disk budget %d bytes is below 1 MiB", c.DiskBytes)
	}
	if c.DiskMinFree < 0 {
		return fmt.Errorf("disk minimum free space %d bytes is negative", c.DiskMinFree)
	}
	if c.MaxObjectBytes <= 0 || c.MaxObjectBytes > c.DiskBytes/2 {
		return fmt.Errorf("max object size %d bytes must be positive and at most half the disk budget (%d)", c.MaxObjectBytes, c.DiskBytes)
	}
	if c.HotThreshold > 0 && (c.HotCopyBytes < 1<<20 || c.HotCopyBytes > c.MemoryBytes/2) {
		return fmt.Errorf("hot copy memory %d bytes: want 1 MiB to half the memory budget (%d)", c.HotCopyBytes, c.MemoryBytes)
	}
	if c.PeerTLS.enabled() && c.PeerCertsFromControlPlane {
		return errors.New("peer TLS from files and from the control plane are exclusive; choose one")
	}
	if c.PeerTLS.enabled() && (c.PeerTLS.CertFile == "" || c.PeerTLS.KeyFile == "" || c.PeerTLS.CAFile == "") {
		return errors.New("peer TLS needs a certificate, its key and the cluster CA")
	}
	if !c.peerHopAuthenticated() && !c.InsecurePeerHop && !loopback.Only(c.PeerAddr) {
		return fmt.Errorf("peer listener %s is not on a loopback address, and the peer hop has no certificates: anyone who "+
			"can reach it could fill the cache. Set --peer-certs-from-control-plane (or --peer-cert, --peer-key and --peer-ca) "+
			"for mutual TLS, or --insecure-peer-hop to accept unauthenticated peers", c.PeerAddr)
	}
	for i := 0; i < len(c.Zone); i++ {
		if b := c.Zone[i]; b < ' ' || b > '~' || i >= 256 {
			return fmt.Errorf("zone %q: use at most 256 printable ASCII characters", c.Zone)
		}
	}
	if c.ControlPlaneTLS == nil && !c.InsecureControlPlane {
		for _, cp := range strings.Split(c.ControlPlane, ",") {
			if !loopback.Only(cp) {
				return fmt.Errorf("control plane %s is not on a loopback address, and no TLS is set for it: the join token, "+
					"the admin token and the node's certificate would cross the network in cleartext, and whoever sits "+
					"between could send the node its ring and purges. Set --control-plane-ca, or --insecure-control-plane "+
					"to connect in cleartext", cp)
			}
		}
	}
	if len(c.PurgeAllow) > 0 && c.AdminToken == "" {
		return errors.New("PURGE from allowed addresses needs the admin token to pass on to the control plane")
	}
	if c.AccessLogSample < 0 || c.AccessLogSample > 1 {
		return fmt.Errorf("access log sample %v: want a share in (0, 1]", c.AccessLogSample)
	}
	if c.OriginTimeout <= 0 {
		return fmt.Errorf("origin timeout %s must be positive", c.OriginTimeout)
	}
	// A relay that gives up before the owner's origin fetch does turns one
	// slow object into a stream of duplicate fetches.
	if c.RelayTimeout <= c.OriginTimeout {
		return fmt.Errorf("relay timeout %s must exceed the origin timeout %s", c.RelayTimeout, c.OriginTimeout)
	}
	return nil
}
