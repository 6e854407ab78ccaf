// Package front holds a node's two request handlers, and is the one place
// that decides what a request is trusted with. The client listener's
// handler (ServeClient) takes requests from anyone: it strips every
// internal header, believes forwarded fields only from trusted proxies,
// normalises the path, and routes the request by its policy: bypass to the
// origin, redirect or relay to the key's owner, a hot copy, or this node's
// owner (package owner). It also answers PURGE and invalidates what an
// unsafe method changed. The peer listener's handler (ServePeer) takes
// requests relayed by other nodes and hands them to the owner, never
// relaying them again.
//
// It imports the owner package for its exported rule (StoreLifetime) and
// seams (Origin, Peers), and calls the owner through Owner and Answerer.
package front

import (
	"io"
	"log/slog"
	"net/http"
	"net/netip"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/shardcache/shardcache/dataplane/hotkey"
	"github.com/shardcache/shardcache/dataplane/httpcache"
	"github.com/shardcache/shardcache/dataplane/internal/sketch"
	"github.com/shardcache/shardcache/dataplane/internal/tasks"
	"github.com/shardcache/shardcache/dataplane/logstream"
	"github.com/shardcache/shardcache/dataplane/metrics"
	"github.com/shardcache/shardcache/dataplane/owner"
	"github.com/shardcache/shardcache/dataplane/purge"
	"github.com/shardcache/shardcache/dataplane/routes"
	"github.com/shardcache/shardcache/dataplane/slice"
	"github.com/shardcache/shardcache/dataplane/store"
	pb "github.com/shardcache/shardcache/proto/shardcache/v1"
	"github.com/shardcache/shardcache/sdk/authlimit"
	"github.com/shardcache/shardcache/sdk/policy"
)

// Owner is the owner's read path, for the keys this node owns.
type Owner interface {
	// Serve answers key from the store or fills it; from is a hot key's
	// first owner to fill from, sl the slice asked for.
	Serve(w http.ResponseWriter, r *http.Request, key string, p *policy.Policy, from *pb.Member, sl *slice.Req)
	// ServeSliced answers from the object's slices; false, having written
	// nothing, when it cannot be sliced.
	ServeSliced(w http.ResponseWriter, r *http.Request, key string, p *policy.Policy) bool
	// Drop removes what the store holds under key.
	Drop(key string)
}

// Answerer answers from an entry held outside the store (a hot copy) as
// the owner answers from its own.
type Answerer interface {
	Usable(e *store.Entry) bool
	Answer(w http.ResponseWriter, r *http.Request, e *store.Entry, rd io.Reader, status string) error
}

// Config is what a Front is built from.
type Config struct {
	ID string
	// Via is the name this node gives itself in the Via of the requests it
	// sends (routes.Via): a client request naming it has looped.
	Via string
	// RelayTimeout and OriginTimeout bound the wait for a peer's or the
	// origin's answer where the policy does not.
	RelayTimeout, OriginTimeout time.Duration
	// BodyTimeout bounds each wait for a client's request body to bring a
	// byte (nginx's client_body_timeout); zero: none.
	BodyTimeout time.Duration
	// PeerMTLS says the peer listener is mutual TLS: a peer request is
	// served only when its certificate names a member of the ring.
	PeerMTLS bool
	// HotThreshold is the node's hot-key rate (per minute); Hot, HotKeys
	// and HotCopies are nil when hot-key handling is off.
	HotThreshold     int
	HotCopyMaxObject int64
	Hot              *sketch.Sketch
	HotKeys          *hotkey.List
	// Logs hands access-log records to the streams operators open
	// (cachectl log); nil for none.
	Logs      *logstream.Hub
	HotCopies *store.Memory
	// TrustedProxies may send forwarded fields; PurgeAllow may PURGE
	// without a token, as AdminToken.
	TrustedProxies, PurgeAllow []netip.Prefix
	AdminToken                 string
	// JoinToken proves to the control plane that a PURGE is relayed by a
	// node, which names its client.
	JoinToken string
	// Admin calls the control plane (at ControlPlane, for messages) for
	// PURGE requests.
	Admin        []pb.AdminServiceClient
	ControlPlane string
	// AccessLog, when set, gets a line for AccessLogSample of requests.
	AccessLog       *slog.Logger
	AccessLogSample float64
	// RequestEpoch asks the control plane for an epoch a peer has seen.
	RequestEpoch func(epoch uint64)

	Owner    Owner
	Answers  Answerer
	Origin   owner.Origin
	Peers    owner.Peers
	Routes   *atomic.Pointer[routes.Table]
	Policies *atomic.Pointer[policy.Set]
	Bans     *purge.Set
	Shadow   *metrics.Shadow
	Metrics  *metrics.Set
	Tasks    *tasks.Group
	Tracer   trace.Tracer // nil: the node does not trace
	Logger   *slog.Logger
}

// Front serves the client and peer listeners.
type Front struct {
	cfg Config
	// draining is set while a stopping node, out of the ring, still
	// serves its peers' handoff requests; lastPeer is when the peer
	// listener last got a request (UnixNano).
	draining atomic.Bool
	lastPeer atomic.Int64
	// purgeAuth holds the PURGE tokens the control plane refused against
	// their clients.
	purgeAuth *authlimit.Limiter
	// statusName is the node's name as a Cache-Status item; relayStatus
	// the member a relaying node adds to its owner's Cache-Status.
	statusName, relayStatus string
}

// A client may send purgeAuthBurst PURGE requests with a wrong token,
// then one per purgeAuthEvery; purgeAuthClients are tracked at most. The
// control plane holds the failures against the same client (the node
// names it, proven by its join token), so many clients guessing through a
// node spend only their own allowances, never the node's.
const (
	purgeAuthBurst   = 5
	purgeAuthEvery   = 6 * time.Second
	purgeAuthClients = 4096
)

// New builds the front.
func New(cfg Config) *Front {
	name := httpcache.SFItem(cfg.ID)
	return &Front{cfg: cfg, purgeAuth: authlimit.New(purgeAuthEvery, purgeAuthBurst, purgeAuthClients),
		statusName: name, relayStatus: httpcache.StatusMember{Node: name, Cache: httpcache.CacheMiss, Detail: "relayed"}.String()}
}

// ServeClient is the client listener's handler.
func (f *Front) ServeClient(w http.ResponseWriter, r *http.Request) { f.serveClient(w, r) }

// ServePeer is the peer listener's handler.
func (f *Front) ServePeer(w http.ResponseWriter, r *http.Request) { f.servePeer(w, r) }

// Drain marks the node draining: out of the ring, it serves its peers'
// handoff requests until it stops.
func (f *Front) Drain() { f.draining.Store(true) }

// Undrain ends a drain: the node is in the ring again.
func (f *Front) Undrain() { f.draining.Store(false) }

// Draining reports whether Drain was called (and Undrain not since).
func (f *Front) Draining() bool { return f.draining.Load() }

// LastPeer is when the peer listener last got a request while draining.
func (f *Front) LastPeer() time.Time { return time.Unix(0, f.lastPeer.Load()) }

// epoch is the ring epoch the node serves with, 0 before the first.
func (f *Front) epoch() uint64 {
	if rt := f.cfg.Routes.Load(); rt != nil {
		return rt.Epoch.GetEpoch()
	}
	return 0
}
