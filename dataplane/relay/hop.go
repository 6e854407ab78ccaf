package relay

import (
	"net/http"
	"strconv"
	"strings"
)

// The vocabulary of the peer hop, named once: the header fields nodes send
// each other and the X-Cache values they answer with.

// Header fields between nodes. They are honoured only on the peer listener:
// the client listener deletes every one of them (InternalHeaders) from
// incoming requests, and no origin request carries them.
const (
	// HopHeader marks a relayed request and names the node that relayed it.
	// A request carrying it is served by the receiver, never relayed again.
	HopHeader = "X-Shardcache-Hop"
	// EpochHeader carries the sender's ring epoch.
	EpochHeader = "X-Shardcache-Epoch"
	// SchemeHeader carries the client-facing scheme, part of the cache key.
	SchemeHeader = "X-Shardcache-Scheme"
	// InvalidateHeader marks a peer request that invalidates its URL.
	InvalidateHeader = "X-Shardcache-Invalidate"
	// SliceHeader, on a peer request, names the slice asked for:
	// "<index>/<size>".
	SliceHeader = "X-Shardcache-Slice"
	// SliceVersionHeader, on a peer request, is the version (strong ETag,
	// else Last-Modified) the slice must belong to.
	SliceVersionHeader = "X-Shardcache-Slice-Version"
	// HandoffHeader marks a handoff request (a new owner asking the key's
	// previous owner for its stored copy), which is never handed off again.
	HandoffHeader = "X-Shardcache-Handoff"
	// HotKeysHeader, on a peer request, asks for the peer's hot keys
	// instead of a cached response: at most its value of them.
	HotKeysHeader = "X-Shardcache-Hot-Keys"
	// PrecopyHeader marks the in-process request of a pre-copy.
	PrecopyHeader = "X-Shardcache-Precopy"
	// PurgeRevisionHeader tells a node, on a peer answer, the purge
	// revision the answering owner had applied: an answer from an owner
	// behind this node may hold what this node purged, and is not kept as
	// a copy.
	PurgeRevisionHeader = "X-Shardcache-Purge-Revision"
	// RefusedHeader, on a peer listener's answer, says the request was
	// refused unserved, and why: the sender serves it otherwise.
	RefusedHeader = "X-Shardcache-Refused"
)

// InternalPrefix starts every header field above; StripInternal deletes
// the fields that start with it.
const InternalPrefix = "X-Shardcache-"

// InternalHeaders are every header field above: taken from no client, sent
// to no origin.
var InternalHeaders = []string{HopHeader, EpochHeader, SchemeHeader, InvalidateHeader, SliceHeader, SliceVersionHeader,
	HandoffHeader, HotKeysHeader, PrecopyHeader, PurgeRevisionHeader, RefusedHeader}

// X-Cache values: how the node that served from its store (X-Cache-Node)
// answered.
const (
	CacheHit    = "HIT"
	CacheMiss   = "MISS"
	CacheBypass = "BYPASS"
	// CacheStale: served past its freshness, because the client allows it
	// (max-stale) or the origin failed (stale-if-error).
	CacheStale = "STALE"
	// CacheUpdating: served stale while one request revalidates it
	// (stale-while-revalidate).
	CacheUpdating = "UPDATING"
	// CacheRevalidated: the origin confirmed the stored response (304).
	CacheRevalidated = "REVALIDATED"
	// CacheExpired: a stored response had expired; the origin sent a new one.
	CacheExpired = "EXPIRED"
	// CachePartial: an answer assembled from slices some of which were
	// stored and some fetched.
	CachePartial = "PARTIAL"
)

// RelayHeader is the header of a client request relayed to a peer by node
// self at ring epoch (0: none yet): the client's end-to-end fields, the
// forwarded-for chain, and the hop marker.
func RelayHeader(r *http.Request, self string, epoch uint64) http.Header {
	h := r.Header.Clone() // the forwarded chain was extended on arrival
	RemoveHopByHop(h)
	h.Set(HopHeader, self)
	if epoch > 0 {
		h.Set(EpochHeader, strconv.FormatUint(epoch, 10))
	}
	h.Set(SchemeHeader, Scheme(r))
	return h
}

// Scheme is the scheme a client used, part of the cache key: the one a
// relaying node names, else "https" when a trusted proxy says so
// (X-Forwarded-Proto, or proto= in Forwarded; the client listener keeps
// both from trusted proxies only), else "http".
func Scheme(r *http.Request) string {
	if v := r.Header[SchemeHeader]; len(v) > 0 {
		if v[0] == "https" {
			return "https"
		}
		return "http"
	}
	if v := r.Header["X-Forwarded-Proto"]; len(v) > 0 {
		first, _, _ := strings.Cut(v[0], ",")
		if strings.EqualFold(strings.TrimSpace(first), "https") {
			return "https"
		}
		return "http"
	}
	for _, v := range r.Header["Forwarded"] {
		first, _, _ := strings.Cut(v, ",")
		for pair := range strings.SplitSeq(first, ";") {
			if k, val, ok := strings.Cut(strings.TrimSpace(pair), "="); ok && strings.EqualFold(k, "proto") {
				if strings.EqualFold(strings.Trim(val, `"`), "https") {
					return "https"
				}
				return "http"
			}
		}
	}
	return "http"
}

// ControlHeader is the header of a peer request node self sends of its
// own (an invalidation, a hot-key listing): the hop marker and field=value.
func ControlHeader(self, field, value string) http.Header {
	return http.Header{HopHeader: {self}, SchemeHeader: {"http"}, field: {value}}
}

// PurgeRevision reads and removes the purge revision of a peer's answer;
// false when the answer carries none.
func PurgeRevision(h http.Header) (int64, bool) {
	v := h.Get(PurgeRevisionHeader)
	h.Del(PurgeRevisionHeader)
	rev, err := strconv.ParseInt(v, 10, 64)
	return rev, err == nil
}

// StripInternal deletes every internal header field from h, in one pass
// over its keys (canonical, as net/http parses them; a key that is not
// canonical is one no Get of these fields finds either). It calls drop,
// when set, for every other key, and deletes it too when drop says so.
func StripInternal(h http.Header, drop func(key string) bool) {
	for k := range h {
		if strings.HasPrefix(k, InternalPrefix) || drop != nil && drop(k) {
			delete(h, k)
		}
	}
}
