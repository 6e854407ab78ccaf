package front

import (
	"encoding/json"
	"net/http"
	"strconv"
	"time"

	"github.com/shardcache/shardcache/dataplane/hotkey"
	"github.com/shardcache/shardcache/dataplane/internal/reply"
	"github.com/shardcache/shardcache/dataplane/relay"
	"github.com/shardcache/shardcache/dataplane/slice"
	"github.com/shardcache/shardcache/sdk/policy"
	"go.opentelemetry.io/otel/attribute"
)

// servePeer is the peer listener's handler: requests relayed by other nodes,
// served from this node's store and never relayed again.
func (f *Front) servePeer(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get(relay.HopHeader) == "" {
		http.Error(w, "peer listener: only requests relayed by shardcache nodes are served here", http.StatusBadRequest)
		return
	}
	if f.draining.Load() {
		f.lastPeer.Store(time.Now().UnixNano())
	}
	if seen, err := strconv.ParseUint(r.Header.Get(relay.EpochHeader), 10, 64); err == nil && seen > f.epoch() {
		// A peer serves a newer epoch: this node's push is late. Ask for
		// it; meanwhile the request is served here, never relayed again.
		f.cfg.RequestEpoch(seen)
	}
	if r.Header.Get(relay.HotKeysHeader) != "" {
		f.serveHotKeys(w, r)
		return
	}
	key, p, sl, err := f.peerKey(r)
	if err != nil {
		http.Error(w, "peer listener: "+err.Error(), http.StatusBadRequest)
		return
	}
	if r.Header.Get(relay.InvalidateHeader) != "" {
		f.drop(key)
		w.WriteHeader(http.StatusNoContent)
		return
	}
	if f.cfg.Tracer != nil {
		annotate(r.Context(), attribute.String("shardcache.node", f.cfg.ID))
	}
	rec := reply.NewRecorder(w)
	w.Header().Set(relay.PurgeRevisionHeader, strconv.FormatInt(f.cfg.Bans.Revision(), 10))
	f.cfg.Owner.Serve(rec, r, key, p, nil, sl)
	f.cfg.Metrics.PeerBytes.WithLabelValues("out").Add(float64(rec.Bytes))
	if r.Header.Get(relay.HandoffHeader) != "" && rec.Status < 300 && !rec.Broken {
		f.cfg.Metrics.Totals.HandoffAnswers.Add(1)
	}
	rec.AbortIfBroken()
}

// peerKey is the key and policy of a peer request: its URL's key under
// the scheme the client used, or the key of the slice it asks for.
func (f *Front) peerKey(r *http.Request) (string, *policy.Policy, *slice.Req, error) {
	scheme := r.Header.Get(relay.SchemeHeader)
	if scheme != "https" {
		scheme = "http"
	}
	p := f.cfg.Policies.Load().Match(policy.Host(r), r.URL.Path)
	key := p.Key(scheme, r)
	sl, err := slice.ParseHeader(r.Header)
	if sl != nil {
		key = sl.Key(key)
	}
	return key, p, sl, err
}

// serveHotKeys answers a peer's relay.HotKeysHeader request: this node's hot
// keys, hottest first.
func (f *Front) serveHotKeys(w http.ResponseWriter, r *http.Request) {
	limit, err := strconv.Atoi(r.Header.Get(relay.HotKeysHeader))
	if err != nil || limit <= 0 {
		http.Error(w, "peer listener: "+relay.HotKeysHeader+" wants a positive count", http.StatusBadRequest)
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
