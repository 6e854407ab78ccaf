// Package owner is the cache: what a node does with a request for a key
// it serves (its own, a hot key's copy, or the slices of a large object).
// A request is one value (Request), built by the front, and goes one way
// through the stages, one file each, every one calling only those after
// it:
//
//	serve.go    the way in: which path a request takes
//	lookup.go   the stored response for the request (bans, Vary)
//	decide.go   fresh, stale, or revalidate (RFC 9111 4, 5.2)
//	collapse.go concurrent misses share one fill
//	fetch.go    the origin, or a peer first (handoff, a hot key's first owner)
//	admit.go    whether and where the answer is stored, streaming into the store
//	answer.go   the stored (or streaming) response written to the client
//
// beside the paths that branch off it: partial content (partial.go),
// sliced objects (assemble.go, slices.go), hot copies (copies.go), and
// the work no client waits on (precopy.go, invalidate.go). Serve returns
// the Outcome the front logs and counts.
package owner

import (
	"context"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/klauspost/compress/zstd"

	"github.com/shardcache/shardcache/dataplane/flight"
	"github.com/shardcache/shardcache/dataplane/httpcache"
	"github.com/shardcache/shardcache/dataplane/internal/notes"
	"github.com/shardcache/shardcache/dataplane/internal/tasks"
	"github.com/shardcache/shardcache/dataplane/metrics"
	"github.com/shardcache/shardcache/dataplane/purge"
	"github.com/shardcache/shardcache/dataplane/registry"
	"github.com/shardcache/shardcache/dataplane/routes"
	"github.com/shardcache/shardcache/dataplane/store"
	"github.com/shardcache/shardcache/sdk/policy"
)

// Origin fetches from a policy's origins (origin.Client).
type Origin interface {
	Fetch(ctx context.Context, r *http.Request, p *policy.Policy, fill bool, extra http.Header) (*http.Response, error)
}

// Upstream fetches from a mirror policy's registries (registry.Client).
type Upstream interface {
	Fetch(ctx context.Context, ref *registry.Ref, r *http.Request, extra http.Header) (*http.Response, error)
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

	Store *store.Store
	// Copies holds copies of hot objects this node does not own, up to
	// CopyMaxObject each, so they stop paying the relay hop; nil when
	// hot-key handling is off.
	Copies        *store.Memory
	CopyMaxObject int64
	Origin        Origin
	// Upstream serves the requests of mirror policies (Request.Registry).
	Upstream Upstream
	Peers    Peers
	// Routes and Policies are the node's, swapped whole on every push;
	// the stages read the Routes a Request carries, loaded once.
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
	CutOff func(now time.Time) (before time.Time, cut bool)
	// MaxInvalidations bounds the invalidations this node sends its peers
	// at once (one a peer for each URL an unsafe request changed): past
	// it, a request's sends wait for room up to invalidateWait, and those
	// still waiting then are not sent (logged, and counted as the peer's
	// "dropped" requests). One peer holds at most a quarter of them (an
	// equal part among fewer than four peers): past that its sends are
	// dropped at once. Zero: 1024.
	MaxInvalidations int
	Tracer           trace.Tracer // nil: no spans of the owner's own
	Logger           *slog.Logger
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
	// caughtUp is set once the first session of this run brought the
	// purges missed while the node was away; until then objects stored
	// before started are not served.
	caughtUp   atomic.Bool
	started    time.Time
	precopying atomic.Bool
	// nodeField is X-Cache-Node's value, shared by every answer.
	nodeField []string
	// statusName is the node's name as a Cache-Status or Proxy-Status item.
	statusName string
	// notes are the last answers other than plain hits, and removals, per
	// key.
	notes notes.Table
	// invalidating holds a token for each invalidation sent to a peer
	// and not yet answered: at most Config.MaxInvalidations.
	invalidating chan struct{}
	// peerSends counts, per peer, the invalidations in flight to it (an
	// entry only while there are some): a peer that does not answer
	// holds at most a quarter of the tokens, so the others are still told.
	peerSendsMu sync.Mutex
	peerSends   map[string]int
}

// New builds an owner over an open store.
func New(cfg Config) *Owner {
	if cfg.MaxInvalidations <= 0 {
		cfg.MaxInvalidations = 1024
	}
	return &Owner{cfg: cfg, started: time.Now(), nodeField: []string{cfg.ID}, statusName: httpcache.SFItem(cfg.ID), filling: map[string]int{},
		invalidating: make(chan struct{}, cfg.MaxInvalidations), peerSends: map[string]int{}}
}

// CaughtUp says the node has the purges issued while it was away: objects
// it stored before this run may be served again, as far as the bans allow.
func (o *Owner) CaughtUp() { o.caughtUp.Store(true) }

// Waiting is the number of requests waiting on another request's fill.
func (o *Owner) Waiting() int64 { return o.flights.Waiting() }

// Precopying reports whether a pre-copy runs.
func (o *Owner) Precopying() bool { return o.precopying.Load() }

// Index is the store as purges see it: what they delete is noted as
// purged.
func (o *Owner) Index() purge.Index { return purgeIndex{o.cfg.Store, o} }

// PurgeRevision is the purge revision this node has applied, which its
// answers to peers carry.
func (o *Owner) PurgeRevision() int64 { return o.cfg.Bans.Revision() }

// DropCopies removes hot copies: of keys, or every one when keys is nil
// (a purge by prefix or tag, which copies are not indexed by).
func (o *Owner) DropCopies(keys []string) {
	if o.cfg.Copies == nil {
		return
	}
	if keys == nil {
		o.cfg.Copies.Clear()
		return
	}
	for _, k := range keys {
		o.cfg.Copies.Delete(k)
	}
}

// Note is what the owner last did with a key other than a plain hit
// (package notes).
type Note = notes.Note

// Note is the owner's last note of key: its last answer other than a
// plain hit, or what removed its stored response.
func (o *Owner) Note(key string) (Note, bool) { return o.notes.Get(key) }

// decoders decode stored zstd bodies for clients that do not accept zstd.
// One goroutine each (concurrency 1) and low memory: a decode runs per
// request.
var decoders = sync.Pool{New: func() any {
	d, err := zstd.NewReader(nil, zstd.WithDecoderConcurrency(1), zstd.WithDecoderLowmem(true))
	if err != nil {
		panic(err) // the options are constant
	}
	return d
}}
