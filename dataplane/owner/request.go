package owner

import (
	"net/http"
	"time"

	"github.com/shardcache/shardcache/dataplane/httpcache"
	"github.com/shardcache/shardcache/dataplane/registry"
	"github.com/shardcache/shardcache/dataplane/routes"
	"github.com/shardcache/shardcache/dataplane/slice"
	pb "github.com/shardcache/shardcache/proto/shardcache/v1"
	"github.com/shardcache/shardcache/sdk/policy"
)

// Request is one request as the owner serves it, built once by whoever
// received it (the front's client handler or its peer gate) and read by
// every stage, which changes none of it.
type Request struct {
	// HTTP is the request as it arrived, decided on arrival: its
	// hop-by-hop fields removed and, from a client, its forwarded chain
	// extended.
	HTTP *http.Request
	// ID is the client request's id (X-Request-Id), for its logs.
	ID string
	// Key is its cache key; Policy the policy it matched.
	Key    string
	Policy *policy.Policy
	// Routes is the ring epoch the request is routed by, loaded once for
	// the whole request; nil before the node has one.
	Routes *routes.Table
	// Now is when the request arrived: every stage's clock.
	Now time.Time
	// Hop holds the trusted facts of a peer's request, read by the peer
	// gate from the hop fields; zero for a client's request.
	Hop Hop
	// From, for a hot key this node is a later owner of, is its first
	// owner, to fill from before the origin.
	From *pb.Member
	// Slice, when set, is the slice of a large object that Key names.
	Slice *slice.Req
	// Assemble asks for the object from its slices (the policy slices
	// it): Serve answers from them, or writes nothing when the object
	// cannot be sliced (Outcome.Served false).
	Assemble bool
	// Registry, under a mirror policy, is the request parsed: its
	// upstream registry and what Key is made of (registry.Ref.Key).
	Registry *registry.Ref
	// Copy asks for this node's copy of a hot object it does not own:
	// Serve answers from a fresh one, or writes nothing.
	Copy bool
	// Account, when set (a full log stream is open, or a relaying peer
	// asks for it), is filled in by the stages: the time of each and the
	// requests they make (account.go). Nil costs nothing.
	Account *Account
}

// Hop is what a peer's request says of itself, believed only from a
// member of the ring (the front's peer gate).
type Hop struct {
	// From is the member that sent the request; "" for a client's.
	From string
	// Handoff asks for a stored copy only: the origin is never asked, and
	// the request is never handed off again.
	Handoff bool
	// Precopy is a pre-copy's own request, in process: it takes what a
	// peer has, never the origin.
	Precopy bool
}

// Outcome is how the owner answered a request: what the front logs and
// counts, with no header read back.
type Outcome struct {
	// Served is false when nothing was written (an Assemble request for
	// an object that is not sliced, a Copy request without a fresh copy).
	Served bool
	// Source is where the body came from: memory, disk, origin, peer,
	// fill (another request's fill), slices, or "" for an error.
	Source string
	// Member is this node's Cache-Status member, as sent: the X-Cache
	// value (Member.Cache), freshness left (Member.TTL), whether the
	// store keeps the answer (a hit, or Member.Stored).
	Member httpcache.StatusMember
	// Node is the node that served from its store (X-Cache-Node).
	Node string
}

// Sources of an answer.
const (
	SourceMemory = "memory"
	SourceDisk   = "disk"
	SourceOrigin = "origin"
	SourcePeer   = "peer"
	SourceFill   = "fill"
	SourceSlices = "slices"
)

// Kept reports whether the store keeps what the answer was: a hit, or
// stored by this answer.
func (o Outcome) Kept() bool {
	switch o.Member.Cache {
	case httpcache.CacheHit, httpcache.CacheStale, httpcache.CacheUpdating:
		return true
	}
	return o.Member.Stored
}
