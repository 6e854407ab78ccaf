// Package owner is a key owner's read path: lookup, decide, collapse,
// fetch (the origin, the previous owner, the first owner of a hot key),
// stream into the store, answer. It also keeps the Vary index, assembles
// sliced objects from their slices' owners, and pre-copies the hot keys a
// ring change gives this node.
//
// The owner is called by the front (package front) for the keys this node
// owns, and never calls it back but through Config.Local, the in-process
// peer hop of a slice it owns. It imports the parts below it: httpcache
// for the rules, store, flight, purge, relay, routes, origin and slice.
package owner

import (
	"context"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/shardcache/shardcache/dataplane/flight"
	"github.com/shardcache/shardcache/dataplane/hop"
	"github.com/shardcache/shardcache/dataplane/httpcache"
	"github.com/shardcache/shardcache/dataplane/internal/tasks"
	"github.com/shardcache/shardcache/dataplane/metrics"
	"github.com/shardcache/shardcache/dataplane/purge"
	"github.com/shardcache/shardcache/dataplane/routes"
	"github.com/shardcache/shardcache/dataplane/store"
	"github.com/shardcache/shardcache/sdk/policy"
)

// Origin fetches from a policy's origins (origin.Client).
type Origin interface {
	Fetch(ctx context.Context, r *http.Request, p *policy.Policy, fill bool, extra http.Header) (*http.Response, error)
}

// Peers sends requests over the peer hop (relay.Client).
type Peers interface {
	Forward(ctx context.Context, peerAddr string, r *http.Request, header http.Header) (*http.Response, error)
}

// Config is what an Owner is built from.
type Config struct {
	ID string
	// OriginTimeout and RelayTimeout bound the wait for an origin's or a
	// peer's answer where the policy does not; HandoffWindow is how long
	// after a ring change the previous owner is asked first.
	OriginTimeout, RelayTimeout, HandoffWindow time.Duration
	// MaxObjectBytes bounds a stored object; DiskBytes bounds a policy's.
	MaxObjectBytes, DiskBytes int64

	Store  *store.Store
	Origin Origin
	Peers  Peers
	// Routes and Policies are the node's, swapped whole on every push.
	Routes   *atomic.Pointer[routes.Table]
	Policies *atomic.Pointer[policy.Set]
	// Bans are the purges in force; Inflight the fills running, which a
	// purge's sweep waits for.
	Bans     *purge.Set
	Inflight *purge.Inflight
	Metrics  *metrics.Set
	Tasks    *tasks.Group
	// CutOff reports whether the node has been cut off from the control
	// plane for longer than its bound, and before when what it stored must
	// be confirmed by the origin: purges issued during the cut may not
	// have reached it. Nil: never.
	CutOff func() (before time.Time, cut bool)
	Tracer trace.Tracer // nil: no spans of the owner's own
	Logger *slog.Logger
}

// Owner serves the keys this node owns.
type Owner struct {
	cfg     Config
	flights flight.Group[*fillShare]
	// filling counts, per URL key, the fills of new Vary variants under
	// way: with the variants stored (the store's count) they make the
	// URL's total that max_variants bounds. An entry lives only while a
	// fill does.
	fillingMu sync.Mutex
	filling   map[string]int
	// local serves a peer request in process; see SetLocal.
	local http.HandlerFunc
	// caughtUp is set once the first session of this run brought the
	// purges missed while the node was away; until then objects stored
	// before started are not served.
	caughtUp   atomic.Bool
	started    time.Time
	precopying atomic.Bool
	// waiting counts requests waiting on another request's fill.
	waiting atomic.Int64
	// nodeField is X-Cache-Node's value, shared by every answer.
	nodeField []string
	// statusName is the node's name as a Cache-Status or Proxy-Status item.
	statusName string
}

// New builds an owner over an open store.
func New(cfg Config) *Owner {
	return &Owner{cfg: cfg, started: time.Now(), nodeField: []string{cfg.ID}, statusName: httpcache.SFItem(cfg.ID), filling: map[string]int{}}
}

// SetLocal installs the peer listener's handler, which serves the slices
// of an object this node owns (or whose owner does not answer) in process.
// It is set once, before the node serves.
func (o *Owner) SetLocal(h http.HandlerFunc) { o.local = h }

// CaughtUp says the node has the purges issued while it was away: objects
// it stored before this run may be served again, as far as the bans allow.
func (o *Owner) CaughtUp() { o.caughtUp.Store(true) }

// Waiting is the number of requests waiting on another request's fill.
func (o *Owner) Waiting() int64 { return o.waiting.Load() }

// Usable reports whether a stored entry may be served: no ban matches it,
// and, until the first session of this run has brought the purges the
// node missed, it was stored by this run.
//
// A copy served without asking the origin (a hot copy) must also be
// confirmed: not stored before a cut-off from the control plane longer
// than the node's bound.
func (o *Owner) Usable(e *store.Entry) bool {
	return o.usable(e) && !o.unconfirmed(e)
}

// usable is Usable for what Serve looks up: it revalidates an unconfirmed
// entry with the origin rather than dropping it.
func (o *Owner) usable(e *store.Entry) bool {
	if !o.caughtUp.Load() && e.Received.Before(o.started) {
		return false
	}
	return o.cfg.Bans.Match(e) == nil
}

// unconfirmed reports whether e may have been purged while the node was
// cut off from the control plane: the cut longer than the node's bound,
// and e stored (or confirmed by the origin) longer ago than that. Such an
// entry is served only once the origin has confirmed it (a conditional
// request), never stale.
func (o *Owner) unconfirmed(e *store.Entry) bool {
	if o.cfg.CutOff == nil {
		return false
	}
	before, cut := o.cfg.CutOff()
	return cut && e.Received.Before(before)
}

// Drop removes what this node stores under key: the response or its
// variants.
func (o *Owner) Drop(key string) {
	for _, k := range o.cfg.Store.Members(key) { // its variants, if it varies
		o.cfg.Store.Delete(k)
	}
	o.cfg.Store.Delete(key)
}

// Index is the store as purges see it.
func (o *Owner) Index() purge.Index { return o.cfg.Store }

// relayHeader is the header of a peer request this node sends for r.
func (o *Owner) relayHeader(r *http.Request) http.Header {
	var epoch uint64
	if rt := o.cfg.Routes.Load(); rt != nil {
		epoch = rt.Epoch.GetEpoch()
	}
	return hop.RelayHeader(r, o.cfg.ID, epoch)
}

// Precopying reports whether a pre-copy runs.
func (o *Owner) Precopying() bool { return o.precopying.Load() }
