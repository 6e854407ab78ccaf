package front

import (
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"

	"github.com/shardcache/shardcache/dataplane/hop"
	"github.com/shardcache/shardcache/dataplane/httpcache"
	"github.com/shardcache/shardcache/dataplane/internal/reply"
	"github.com/shardcache/shardcache/dataplane/metrics"
	"github.com/shardcache/shardcache/dataplane/owner"
	pb "github.com/shardcache/shardcache/proto/shardcache/v1"
	"github.com/shardcache/shardcache/sdk/policy"
)

// route serves req by bypass, redirect, relay or from this node's owner,
// as its policy and the ring say, and returns the route taken and how the
// request was answered.
//
// A hot key has the first replication-factor ring members as owners: each
// serves it from its own store, a later owner filling from the first rather
// than the origin. A node that owns a hot key not at all relays it to one
// of its owners, picked per request, and keeps a local copy for as long as
// the object stays fresh. So does it of any key while its copies have room
// (owner.Keep), a key it is a later owner of included while the key is not
// hot: once hot, that owner answers from the copy while it lasts and else
// from its store, filled from the first owner.
func (f *Front) route(rec *reply.Recorder, req *owner.Request) (string, owner.Outcome) {
	r, p := req.HTTP, req.Policy
	rec.Strip = p.Targeted // the cluster's own targeted field is for this cluster only
	if len(p.Registries) > 0 {
		// A mirror serves pulls from its registries only: never around
		// the cache (mirror.go).
		if out, ok := f.mirror(rec, req); !ok {
			return metrics.RouteRejected, out
		}
	} else if reason := bypassReason(r, p); reason != "" {
		return metrics.RouteBypass, f.bypass(rec, req, reason)
	} else {
		req.Key = p.Key(hop.Scheme(r), r)
	}
	rec.Key = req.Key
	if p.SliceSize > 0 {
		sliced := *req
		sliced.Assemble = true
		if out := f.cfg.Owner.Serve(rec, sliced); out.Served {
			return metrics.RouteSliced, out
		}
	}
	rt := req.Routes
	if rt == nil || p.Mode == pb.CacheMode_CACHE_MODE_LOCAL {
		return metrics.RouteLocal, f.cfg.Owner.Serve(rec, *req)
	}
	hot := !p.AuthorizeEach && f.isHot(req) // a hot copy would serve without the origin's check
	replicas := 1
	if hot {
		replicas = p.ReplicationFactor
	}
	// The key's owners once it is hot, of which a cold key has the first.
	var buf [4]*pb.Member
	all := rt.Owners(buf[:0], req.Key, max(1, p.ReplicationFactor))
	owners := all[:min(replicas, len(all))]
	if len(owners) == 0 {
		return metrics.RouteLocal, f.cfg.Owner.Serve(rec, *req)
	}
	// copies: this node may keep copies of what it relays (a key checked
	// with the origin on every request may not be served from one).
	copies := !p.AuthorizeEach && f.cfg.Hot != nil
	mine := slices.IndexFunc(all, func(m *pb.Member) bool { return m.GetId() == f.cfg.ID })
	switch {
	case mine == 0:
		return metrics.RouteLocal, f.cfg.Owner.Serve(rec, *req)
	case mine > 0 && mine < len(owners):
		// A replica of a hot key serves it from its store, which fills
		// from the first owner, unless it kept a copy while the key was
		// cold: that copy answers first, and saves the fill's hop.
		if out, ok := f.serveCopy(rec, req, copies && f.cfg.Owner.HasCopy(req.Key)); ok {
			return metrics.RouteLocal, out
		}
		req.From = owners[0]
		return metrics.RouteLocal, f.cfg.Owner.Serve(rec, *req)
	}
	// Not an owner, or a replica of a key not hot (yet): it keeps a copy
	// of what it relays while copies have room, so that a key's next
	// requests stay here, not only once it is hot.
	if out, ok := f.serveCopy(rec, req, hot || copies && f.cfg.Owner.HasCopy(req.Key)); ok {
		return metrics.RouteLocal, out
	}
	return f.toOwners(rec, req, owners, hot || copies, hot)
}

// serveCopy serves req from this node's copy of its key when try says
// to (a hot key's is looked for without asking HasCopy first); ok says
// it answered.
func (f *Front) serveCopy(rec *reply.Recorder, req *owner.Request, try bool) (owner.Outcome, bool) {
	if !try {
		return owner.Outcome{}, false
	}
	copied := *req
	copied.Copy = true
	out := f.cfg.Owner.Serve(rec, copied)
	return out, out.Served
}

// toOwners relays req to one of its owners or, in redirect mode, sends the
// client there; when no owner answers, to the next ring member, which
// owns the key once the owner leaves the ring; when that fails too, it
// serves from here: an origin request, but the client is served until the
// next epoch.
func (f *Front) toOwners(rec *reply.Recorder, req *owner.Request, owners []*pb.Member, keep, hot bool) (string, owner.Outcome) {
	// A hot key's owners share the requests relayed to it: each one goes
	// to an owner picked at random, the others tried after it. (A later
	// owner that lacks the object fills from the first, not the origin.)
	start := 0
	if len(owners) > 1 {
		start = rand.IntN(len(owners))
	}
	if m := owners[start]; req.Policy.Mode == pb.CacheMode_CACHE_MODE_REDIRECT && m.GetPublicUrl() != "" {
		redirect(rec, req.HTTP, m)
		return metrics.RouteRedirect, owner.Outcome{Served: true, Node: m.GetId()}
	}
	for i := range owners {
		if out, ok := f.relay(rec, req, owners[(start+i)%len(owners)], keep, hot); ok {
			f.cfg.Metrics.Totals.Relayed.Add(1)
			return metrics.RouteRelayed, out
		}
	}
	f.cfg.Metrics.RelayFallback.Inc()
	var buf [4]*pb.Member
	if next := req.Routes.Owners(buf[:0], req.Key, len(owners)+1); len(next) > len(owners) {
		if alt := next[len(owners)]; alt.GetId() != f.cfg.ID {
			if out, ok := f.relay(rec, req, alt, keep, hot); ok {
				f.cfg.Metrics.Totals.Relayed.Add(1)
				return metrics.RouteRelayed, out
			}
		}
	}
	return metrics.RouteLocal, f.cfg.Owner.Serve(rec, *req)
}

// isHot counts a request for its key and says whether the key's rate at
// this node is above the policy's (or the node's) threshold; a hot key's
// request is remembered for pre-copy.
func (f *Front) isHot(req *owner.Request) bool {
	if f.cfg.Hot == nil {
		return false
	}
	threshold := f.cfg.HotThreshold
	if req.Policy.HotThreshold > 0 {
		threshold = req.Policy.HotThreshold
	}
	n := f.cfg.Hot.Observe(req.Key)
	if f.cfg.Hot.Rate(n) < float64(threshold) {
		return false
	}
	f.cfg.Metrics.HotRequests.Inc()
	// The list is told of a hot key once in noteEvery of its requests
	// (each count is reached once while it climbs): enough to list it
	// and keep it listed, without a lookup in the list per request.
	if n%noteEvery == 0 || f.cfg.Hot.Rate(n-1) < float64(threshold) {
		f.cfg.HotKeys.Note(req.Key, req.Policy.ShownKey(hop.Scheme(req.HTTP), req.HTTP, req.Key), req.HTTP, req.Now)
	}
	return true
}

// noteEvery is how many of a hot key's requests go by between two notes
// of it in the hot-key list. At the default threshold (60 a minute) a note
// comes every 8 s or so, well within the minute after which a full list
// lets a key go.
const noteEvery = 8

// redirect answers 307 with the owner's public URL, so the body crosses the
// network once. The owner serves the redirected request as its own.
func redirect(w http.ResponseWriter, r *http.Request, m *pb.Member) {
	w.Header().Set("Location", strings.TrimSuffix(m.GetPublicUrl(), "/")+r.URL.RequestURI())
	w.Header().Set("X-Cache-Node", m.GetId())
	w.WriteHeader(http.StatusTemporaryRedirect)
}

// bypassReason says why r must not go through the cache (a reason,
// httpcache.Reason*), or "".
func bypassReason(r *http.Request, p *policy.Policy) string {
	switch {
	case r.Method != http.MethodGet && r.Method != http.MethodHead:
		return httpcache.ReasonMethod
	case r.Header.Get("Authorization") != "" && !p.CacheAuthorized:
		return httpcache.ReasonAuthorization
	case r.Header.Get("Upgrade") != "":
		return httpcache.ReasonUpgrade
	}
	for _, v := range r.Header.Values("Cache-Control") {
		if strings.Contains(strings.ToLower(v), "no-store") {
			return httpcache.ReasonRequestNoStore
		}
	}
	switch {
	case p.Mode == pb.CacheMode_CACHE_MODE_BYPASS:
		return httpcache.ReasonPolicyBypass
	case p.Bypass(r):
		return httpcache.ReasonBypassRule
	}
	return ""
}
