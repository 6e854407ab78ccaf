// Package front holds a node's two request handlers, and is the one place
// that decides what a request is trusted with and where it goes. The
// client listener's handler (ServeClient) takes requests from anyone: it
// decides each once on arrival (arrive.go), builds the one owner.Request
// the rest reads, and routes it by its policy (route.go): around the cache
// to the origin (bypass.go), to the key's owner over the peer hop
// (toowner.go) or by a redirect, or to this node's owner (package owner).
// It records the owner's Outcome (account.go) and answers PURGE
// (purgereq.go). The peer listener's handler (ServePeer, peer.go) is the
// peer gate: it serves only members of the ring, believes their hop fields
// as typed facts, and hands their requests to the owner, never relaying
// them again.
//
// The cache itself (the store, purges, hot copies, invalidation) is the
// owner's: the front reaches it through Owner alone.
package front

import (
	"context"
	"log/slog"
	"net/http"
	"net/netip"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"

	"github.com/shardcache/shardcache/dataplane/hotkey"
	"github.com/shardcache/shardcache/dataplane/httpcache"
	"github.com/shardcache/shardcache/dataplane/internal/sketch"
	"github.com/shardcache/shardcache/dataplane/internal/tasks"
	"github.com/shardcache/shardcache/dataplane/logstream"
	"github.com/shardcache/shardcache/dataplane/metrics"
	"github.com/shardcache/shardcache/dataplane/owner"
	"github.com/shardcache/shardcache/dataplane/routes"
	pb "github.com/shardcache/shardcache/proto/shardcache/v1"
	"github.com/shardcache/shardcache/sdk/authlimit"
	"github.com/shardcache/shardcache/sdk/policy"
)

// Owner is the cache, for the requests this node serves.
type Owner interface {
	// Serve answers req (its own key, a slice, an assembled object, a hot
	// copy) and says how.
	Serve(w http.ResponseWriter, req owner.Request) owner.Outcome
	// Keep answers req from resp, its owner's answer relayed, keeping a
	// copy where it may (of a hot key, or of any while the copies have
	// room); false, having written nothing, when it keeps none.
	Keep(w http.ResponseWriter, req owner.Request, resp *http.Response, hot bool) bool
	// HasCopy reports whether this node holds a copy of key.
	HasCopy(key string) bool
	// Invalidate drops what an unsafe request changed (or a peer's
	// invalidation names).
	Invalidate(req owner.Request, h http.Header)
}

// Purger records purges with the control plane: PURGE requests reach it
// through this alone (session.Admin).
type Purger interface {
	// Purge makes call on a control-plane replica that answers.
	Purge(ctx context.Context, call func(context.Context, pb.AdminServiceClient) (*pb.PurgeStatus, error)) (*pb.PurgeStatus, error)
}

// PurgeCall is one AdminService purge call.
type PurgeCall = func(context.Context, pb.AdminServiceClient) (*pb.PurgeStatus, error)

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
	// PeerSendTimeout bounds each wait of an answer on the peer hop's
	// HTTP/2 class for the relaying peer to take a byte (to open a
	// flow-control window); zero: none.
	PeerSendTimeout time.Duration
	// PeerMTLS says the peer listener is mutual TLS: a peer request is
	// served only when its certificate names a member of the ring.
	PeerMTLS bool
	// PublicPort is ":<port>" clients reach the node on ("" for the
	// scheme's default): the port a client's Host is given on arrival,
	// whatever it named (arrive.go). Nil: none.
	PublicPort func() string
	// HotThreshold is the node's hot-key rate (per minute); Hot and
	// HotKeys are nil when hot-key handling is off.
	HotThreshold int
	Hot          *sketch.Sketch
	HotKeys      *hotkey.List
	// Logs hands access-log records to the streams operators open
	// (cachectl log); nil for none.
	Logs *logstream.Hub
	// TrustedProxies may send forwarded fields; PurgeAllow may PURGE
	// without a token, as AdminToken.
	TrustedProxies, PurgeAllow []netip.Prefix
	AdminToken                 string
	// JoinToken proves to the control plane that a PURGE is relayed by a
	// node, which names its client.
	JoinToken string
	// Purger records PURGE requests' purges with the control plane (at
	// ControlPlane, for messages).
	Purger       Purger
	ControlPlane string
	// AccessLog, when set, gets a line for AccessLogSample of requests.
	AccessLog       *slog.Logger
	AccessLogSample float64
	// RequestEpoch asks the control plane for an epoch a peer has seen.
	RequestEpoch func(epoch uint64)

	Owner    Owner
	Origin   owner.Origin
	Peers    owner.Peers
	Routes   *atomic.Pointer[routes.Table]
	Policies *atomic.Pointer[policy.Set]
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
	// ids assigns request ids; reasons counts the answers that were not
	// plain hits by reason, each reason's counter looked up once.
	ids     *requestIDs
	reasons map[string]prometheus.Counter
	// pullTokens are the mirror policies' pull tokens, as last read.
	pullTokens pullTokens
	// refusals bounds the lines refused peer requests write.
	refusals refusalLog
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
	f := &Front{cfg: cfg, purgeAuth: authlimit.New(purgeAuthEvery, purgeAuthBurst, purgeAuthClients),
		statusName: name, relayStatus: httpcache.RelayedMember(name), ids: newRequestIDs(), reasons: map[string]prometheus.Counter{}}
	if cfg.Metrics != nil {
		for _, r := range append(httpcache.Reasons, reasonOther) {
			f.reasons[r] = cfg.Metrics.Reasons.WithLabelValues(r)
		}
	}
	return f
}

// reasonOther counts a reason this node does not know, from an owner of
// another version: the label's values stay the known ones.
const reasonOther = "other"

// countReason counts an answer that was not a plain hit by its reason.
func (f *Front) countReason(reason string) {
	c, ok := f.reasons[reason]
	if !ok {
		c = f.reasons[reasonOther]
	}
	if c != nil {
		c.Inc()
	}
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
