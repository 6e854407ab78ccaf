package front

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"go.opentelemetry.io/otel/attribute"

	"github.com/shardcache/shardcache/dataplane/hop"
	"github.com/shardcache/shardcache/dataplane/hotkey"
	"github.com/shardcache/shardcache/dataplane/internal/reply"
	"github.com/shardcache/shardcache/dataplane/relay"
	"github.com/shardcache/shardcache/dataplane/slice"
	pb "github.com/shardcache/shardcache/proto/shardcache/v1"
	"github.com/shardcache/shardcache/sdk/policy"
)

// servePeer is the peer listener's handler: requests relayed by other nodes,
// served from this node's store and never relayed again. It serves only
// HTTP/2 requests that carry the hop marker and, on a mutual-TLS peer hop,
// come with a certificate of the cluster CA naming a member of the ring;
// the rest are refused, logged and counted.
func (f *Front) servePeer(w http.ResponseWriter, r *http.Request) {
	if r.ProtoMajor != 2 {
		w.Header().Set("Connection", "close")
		f.refusePeer(w, r, "http1", http.StatusHTTPVersionNotSupported, "peer listener: HTTP/2 only; nodes speak it to each other")
		return
	}
	if r.Header.Get(hop.Marker) == "" {
		f.refusePeer(w, r, "no_hop", http.StatusBadRequest, "peer listener: only requests relayed by shardcache nodes are served here")
		return
	}
	if f.cfg.PeerMTLS {
		// The handshake checked the certificate against the cluster CA;
		// it must also name a member of the ring.
		id := ""
		if r.TLS != nil && len(r.TLS.PeerCertificates) > 0 {
			id = relay.Identity(r.TLS.PeerCertificates[0])
		}
		if id == "" || !f.cfg.Routes.Load().Member(id) {
			// A node that has just joined relays before this node has
			// the epoch naming it: ask for the epoch it has seen.
			f.epochHint(r)
			f.refusePeer(w, r, "not_a_member", http.StatusForbidden,
				fmt.Sprintf("peer listener: the certificate names %q, not a member of the ring", id))
			return
		}
	}
	f.serveLocal(w, r)
}

// ServeLocal serves a peer request made in process (a slice this node
// serves itself): it has no transport to check.
func (f *Front) ServeLocal(w http.ResponseWriter, r *http.Request) { f.serveLocal(w, r) }

// epochHint asks the control plane for the epoch a peer request says its
// sender serves, when it is newer than this node's: this node's push is
// late.
func (f *Front) epochHint(r *http.Request) {
	if seen, err := strconv.ParseUint(r.Header.Get(hop.EpochField), 10, 64); err == nil && seen > f.epoch() {
		f.cfg.RequestEpoch(seen)
	}
}

// serveLocal serves a peer request that passed servePeer's checks.
func (f *Front) serveLocal(w http.ResponseWriter, r *http.Request) {
	if f.draining.Load() {
		f.lastPeer.Store(time.Now().UnixNano())
	}
	// Meanwhile the request is served here, never relayed again.
	f.epochHint(r)
	if r.Header.Get(hop.HotKeysField) != "" {
		f.serveHotKeys(w, r)
		return
	}
	key, p, sl, err := f.peerKey(r)
	if err != nil {
		http.Error(w, "peer listener: "+err.Error(), http.StatusBadRequest)
		return
	}
	if r.Header.Get(hop.InvalidateField) != "" {
		if sl != nil {
			f.drop(key) // one slice's head, as the assembler asks
		} else {
			f.dropURL(r, p)
		}
		w.WriteHeader(http.StatusNoContent)
		return
	}
	if f.cfg.Tracer != nil {
		annotate(r.Context(), attribute.String("shardcache.node", f.cfg.ID))
	}
	rec := reply.NewRecorder(w)
	w.Header().Set(hop.PurgeRevisionField, strconv.FormatInt(f.cfg.Bans.Revision(), 10))
	f.cfg.Owner.Serve(rec, r, key, p, f.replicaOf(r, key, p, sl), sl)
	f.cfg.Metrics.PeerBytes.WithLabelValues("out").Add(float64(rec.Bytes))
	if r.Header.Get(hop.HandoffField) != "" && rec.Status < 300 && !rec.Broken {
		f.cfg.Metrics.Totals.HandoffAnswers.Add(1)
	}
	rec.AbortIfBroken()
}

// peerKey is the key and policy of a peer request: its URL's key under
// the scheme the client used, or the key of the slice it asks for.
func (f *Front) peerKey(r *http.Request) (string, *policy.Policy, *slice.Req, error) {
	p := f.cfg.Policies.Load().Match(policy.Host(r), r.URL.Path)
	key := p.Key(hop.Scheme(r), r)
	sl, err := slice.ParseHeader(r.Header)
	if sl != nil {
		key = sl.Key(key)
	}
	return key, p, sl, err
}

// serveHotKeys answers a peer's hop.HotKeysField request: this node's hot
// keys, hottest first.
func (f *Front) serveHotKeys(w http.ResponseWriter, r *http.Request) {
	limit, err := strconv.Atoi(r.Header.Get(hop.HotKeysField))
	if err != nil || limit <= 0 {
		http.Error(w, "peer listener: "+hop.HotKeysField+" wants a positive count", http.StatusBadRequest)
		return
	}
	out := []*hotkey.Key{}
	if f.cfg.Hot != nil {
		out = f.cfg.HotKeys.Hottest(f.cfg.Hot, limit)
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(out)
}

// precopy takes the hottest keys this node gained in rt from their previous

// refusePeer answers a peer request that is not served, logs why and
// counts it by reason.
func (f *Front) refusePeer(w http.ResponseWriter, r *http.Request, reason string, code int, msg string) {
	f.cfg.Metrics.PeerRefused.WithLabelValues(reason).Inc()
	w.Header().Set(hop.RefusedField, reason)
	f.cfg.Logger.Warn("refused a peer request", "reason", reason, "remote", r.RemoteAddr, "detail", msg)
	http.Error(w, msg, code)
}

// replicaOf is a hot key's first owner when this node is one of its later
// owners (a request relayed here to share the key's load): the owner to
// fill from before the origin. Nil otherwise.
func (f *Front) replicaOf(r *http.Request, key string, p *policy.Policy, sl *slice.Req) *pb.Member {
	rt := f.cfg.Routes.Load()
	if rt == nil || sl != nil || p.ReplicationFactor < 2 || r.Header.Get(hop.HandoffField) != "" {
		return nil
	}
	var buf [4]*pb.Member
	owners := rt.Owners(buf[:0], key, p.ReplicationFactor)
	for i, o := range owners {
		if i > 0 && o.GetId() == f.cfg.ID {
			return owners[0]
		}
	}
	return nil
}
