// Package hop is the vocabulary of the peer hop, named once: the header
// fields nodes send each other, and how a relayed request's are built,
// read and stripped. Of the data plane it imports only httpcache.
package hop

import (
	"net/http"
	"strconv"
	"strings"

	"github.com/shardcache/shardcache/dataplane/httpcache"
)

// Header fields between nodes. They are honoured only on the peer listener:
// the client listener deletes every one of them (Fields) from
// incoming requests, and no origin request carries them.
const (
	// Marker marks a relayed request and names the node that relayed it.
	// A request carrying it is served by the receiver, never relayed again.
	Marker = "X-Shardcache-Hop"
	// EpochField carries the sender's ring epoch.
	EpochField = "X-Shardcache-Epoch"
	// SchemeField carries the client-facing scheme, part of the cache key.
	SchemeField = "X-Shardcache-Scheme"
	// InvalidateField marks a peer request that invalidates its URL.
	InvalidateField = "X-Shardcache-Invalidate"
	// SliceField, on a peer request, names the slice asked for:
	// "<index>/<size>".
	SliceField = "X-Shardcache-Slice"
	// SliceVersionField, on a peer request, is the version (strong ETag,
	// else Last-Modified) the slice must belong to.
	SliceVersionField = "X-Shardcache-Slice-Version"
	// HandoffField marks a handoff request (a new owner asking the key's
	// previous owner for its stored copy), which is never handed off again.
	HandoffField = "X-Shardcache-Handoff"
	// HotKeysField, on a peer request, asks for the peer's hot keys
	// instead of a cached response: at most its value of them.
	HotKeysField = "X-Shardcache-Hot-Keys"
	// PurgeRevisionField tells a node, on a peer answer, the purge
	// revision the answering owner had applied: an answer from an owner
	// behind this node may hold what this node purged, and is not kept as
	// a copy.
	PurgeRevisionField = "X-Shardcache-Purge-Revision"
	// RefusedField, on a peer listener's answer, says the request was
	// refused unserved, and why: the sender serves it otherwise.
	RefusedField = "X-Shardcache-Refused"
	// AccountField, on a peer request, asks the owner for its account of
	// the request (its stages' times, the requests it made), which its
	// answer carries in the same field (JSON): a full log stream is open
	// on the sender.
	AccountField = "X-Shardcache-Account"
)

// Prefix starts every header field above; Strip deletes
// the fields that start with it.
const Prefix = "X-Shardcache-"

// Fields are every header field above: taken from no client, sent
// to no origin.
var Fields = []string{Marker, EpochField, SchemeField, InvalidateField, SliceField, SliceVersionField,
	HandoffField, HotKeysField, PurgeRevisionField, RefusedField, AccountField}

// RelayHeader is the header of a client request relayed to a peer by node
// self at ring epoch (0: none yet): the client's end-to-end fields, the
// forwarded-for chain, and the hop marker.
func RelayHeader(r *http.Request, self string, epoch uint64) http.Header {
	h := r.Header.Clone() // the forwarded chain was extended on arrival
	httpcache.RemoveHopByHop(h)
	h.Set(Marker, self)
	if epoch > 0 {
		h.Set(EpochField, strconv.FormatUint(epoch, 10))
	}
	h.Set(SchemeField, Scheme(r))
	return h
}

// Scheme is the scheme a client used, part of the cache key: the one a
// relaying node names, else "https" when a trusted proxy says so
// (X-Forwarded-Proto, or proto= in Forwarded; the client listener keeps
// both from trusted proxies only), else "http".
func Scheme(r *http.Request) string {
	if v := r.Header[SchemeField]; len(v) > 0 {
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
	return http.Header{Marker: {self}, SchemeField: {"http"}, field: {value}}
}

// PurgeRevision reads and removes the purge revision of a peer's answer;
// false when the answer carries none.
func PurgeRevision(h http.Header) (int64, bool) {
	v := h.Get(PurgeRevisionField)
	h.Del(PurgeRevisionField)
	rev, err := strconv.ParseInt(v, 10, 64)
	return rev, err == nil
}

// Strip deletes every internal header field from h, in one pass
// over its keys (canonical, as net/http parses them; a key that is not
// canonical is one no Get of these fields finds either). It calls drop,
// when set, for every other key, and deletes it too when drop says so.
func Strip(h http.Header, drop func(key string) bool) {
	for k := range h {
		if strings.HasPrefix(k, Prefix) || drop != nil && drop(k) {
			delete(h, k)
		}
	}
}
