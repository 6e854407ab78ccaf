package dataplane

import (
	"cmp"
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/shardcache/shardcache/dataplane/relay"
	pb "github.com/shardcache/shardcache/proto/shardcache/v1"
	"github.com/shardcache/shardcache/sdk/policy"
)

// Pre-copy. Handoff moves a key when it is next asked for; the hottest
// keys are asked for at once, by many clients. So when a ring change gives
// this node keys, it asks every peer for the keys it has seen hot (with
// what rebuilds a request for them), and takes those it now owns from
// their previous owners by handoff before clients ask. A pre-copy never
// goes to the origin: a key its previous owner does not have is left for
// the first client that asks.
const (
	// hotListMax bounds the hot keys a node remembers; precopyMax the keys
	// one ring change pre-copies.
	hotListMax = 4096
	precopyMax = 512
)

// hotList remembers the keys this node has seen hot: safe for concurrent
// use, and cheap for a key already in it.
type hotList struct {
	keys  sync.Map // key -> *hotKey
	count atomic.Int64
	prune atomic.Int64 // UnixNano of the last prune
}

// hotKey is what rebuilds a request for a hot key.
type hotKey struct {
	Key  string  `json:"key"`
	Host string  `json:"host"`
	URI  string  `json:"uri"`
	Rate float64 `json:"rate"` // when listed: requests per minute, estimated
	seen atomic.Int64
}

// note records that key, asked for by r, is hot.
func (h *hotList) note(key string, r *http.Request) {
	now := time.Now().UnixNano()
	if v, ok := h.keys.Load(key); ok {
		if k := v.(*hotKey); now-k.seen.Load() > int64(time.Second) {
			k.seen.Store(now)
		}
		return
	}
	if h.count.Load() >= hotListMax {
		if !h.pruneOld(now) {
			return
		}
	}
	k := &hotKey{Key: key, Host: r.Host, URI: r.URL.RequestURI()}
	k.seen.Store(now)
	if _, loaded := h.keys.LoadOrStore(key, k); !loaded {
		h.count.Add(1)
	}
}

// pruneOld drops the keys not seen hot for a minute, at most every ten
// seconds; it reports whether there is room now.
func (h *hotList) pruneOld(now int64) bool {
	last := h.prune.Load()
	if now-last < int64(10*time.Second) || !h.prune.CompareAndSwap(last, now) {
		return false
	}
	h.keys.Range(func(key, v any) bool {
		if now-v.(*hotKey).seen.Load() > int64(time.Minute) {
			h.keys.Delete(key)
			h.count.Add(-1)
		}
		return true
	})
	return h.count.Load() < hotListMax
}

// serveHotKeys answers a peer's relay.HotKeysHeader request: this node's hot
// keys, hottest first.
func (n *Node) serveHotKeys(w http.ResponseWriter, r *http.Request) {
	limit, err := strconv.Atoi(r.Header.Get(relay.HotKeysHeader))
	if err != nil || limit <= 0 {
		http.Error(w, "peer listener: "+relay.HotKeysHeader+" wants a positive count", http.StatusBadRequest)
		return
	}
	var out []*hotKey
	if n.hot != nil {
		n.hotKeys.keys.Range(func(_, v any) bool {
			k := v.(*hotKey)
			out = append(out, &hotKey{Key: k.Key, Host: k.Host, URI: k.URI, Rate: float64(n.hot.Estimate(k.Key))})
			return true
		})
	}
	slices.SortFunc(out, func(a, b *hotKey) int { return cmp.Compare(b.Rate, a.Rate) })
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(out[:min(limit, len(out))])
}

// precopy takes the hottest keys this node gained in rt from their previous
// owners. One runs at a time; a ring change during one is left to handoff.
func (n *Node) precopy(rt *routes) {
	if !n.precopying.CompareAndSwap(false, true) {
		return
	}
	defer n.precopying.Store(false)
	ctx, cancel := context.WithTimeout(n.fillCtx, time.Minute)
	defer cancel()
	now := time.Now()
	wanted := map[string]*hotKey{}
	for _, m := range rt.epoch.GetMembers() {
		if m.GetId() == n.cfg.ID {
			continue
		}
		for _, k := range n.peerHotKeys(ctx, m) {
			if rt.owner(k.Key).GetId() != n.cfg.ID || rt.handoffFrom(k.Key, n.cfg.ID, n.cfg.HandoffWindow, now) == nil {
				continue // not gained by this node
			}
			if prev, ok := wanted[k.Key]; !ok || prev.Rate < k.Rate {
				wanted[k.Key] = k
			}
		}
	}
	list := make([]*hotKey, 0, len(wanted))
	for _, k := range wanted {
		if _, stored := n.store.Peek(k.Key); !stored {
			list = append(list, k)
		}
	}
	slices.SortFunc(list, func(a, b *hotKey) int { return cmp.Compare(b.Rate, a.Rate) })
	list = list[:min(len(list), precopyMax)]
	var wg sync.WaitGroup
	sem := make(chan struct{}, 4)
	for _, k := range list {
		u, err := url.ParseRequestURI(k.URI)
		if err != nil {
			continue
		}
		r := (&http.Request{Method: http.MethodGet, URL: u, Host: k.Host, Header: http.Header{relay.PrecopyHeader: {"1"}}}).WithContext(ctx)
		p := n.policies.Load().Match(policy.Host(r), u.Path)
		if p.SliceSize > 0 || p.Key("http", r) != k.Key {
			continue // keyed by more than the URL, or sliced: left to handoff
		}
		sem <- struct{}{}
		wg.Go(n.guard("precopy", func() {
			defer func() { <-sem }()
			n.serveOwned(discard{h: http.Header{}}, r, k.Key, p, nil, nil)
		}))
	}
	wg.Wait()
	n.log.Info("pre-copied hot keys gained in the ring change", "epoch", rt.epoch.GetEpoch(), "asked", len(list))
}

// peerHotKeys asks m for its hot keys; none when it cannot answer.
func (n *Node) peerHotKeys(ctx context.Context, m *pb.Member) []*hotKey {
	h := http.Header{relay.HopHeader: {n.cfg.ID}, relay.SchemeHeader: {"http"}, relay.HotKeysHeader: {strconv.Itoa(hotListMax)}}
	req := &http.Request{Method: http.MethodGet, URL: &url.URL{Path: "/"}, Host: "shardcache", Header: h}
	resp, err := n.forward(ctx, m, req, h, handoffTimeout)
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	var keys []*hotKey
	if resp.StatusCode != http.StatusOK || json.NewDecoder(resp.Body).Decode(&keys) != nil {
		return nil
	}
	return keys
}
