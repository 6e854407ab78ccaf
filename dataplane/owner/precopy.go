package owner

import (
	"cmp"
	"context"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/shardcache/shardcache/dataplane/hop"
	"github.com/shardcache/shardcache/dataplane/hotkey"
	"github.com/shardcache/shardcache/dataplane/internal/reply"
	"github.com/shardcache/shardcache/dataplane/routes"
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

// precopyMax bounds the keys one ring change pre-copies.
const precopyMax = 512

// Precopy takes the hottest keys this node gained in rt from their
// previous owners. One runs at a time; a ring change during one is left to
// handoff.
func (o *Owner) Precopy(rt *routes.Table) {
	if !o.precopying.CompareAndSwap(false, true) {
		return
	}
	defer o.precopying.Store(false)
	ctx, cancel := context.WithTimeout(o.cfg.Tasks.Context(), time.Minute)
	defer cancel()
	now := time.Now()
	wanted := map[string]*hotkey.Key{}
	for _, m := range rt.Epoch.GetMembers() {
		if m.GetId() == o.cfg.ID {
			continue
		}
		for _, k := range o.peerHotKeys(ctx, m) {
			if rt.Owner(k.Key).GetId() != o.cfg.ID || rt.HandoffFrom(k.Key, o.cfg.ID, o.cfg.HandoffWindow, now) == nil {
				continue // not gained by this node
			}
			if prev, ok := wanted[k.Key]; !ok || prev.Rate < k.Rate {
				wanted[k.Key] = k
			}
		}
	}
	list := make([]*hotkey.Key, 0, len(wanted))
	for _, k := range wanted {
		if _, stored := o.cfg.Store.Peek(k.Key); !stored {
			list = append(list, k)
		}
	}
	slices.SortFunc(list, func(a, b *hotkey.Key) int { return cmp.Compare(b.Rate, a.Rate) })
	list = list[:min(len(list), precopyMax)]
	var wg sync.WaitGroup
	sem := make(chan struct{}, 4)
	for _, k := range list {
		u, err := url.ParseRequestURI(k.URI)
		if err != nil {
			continue
		}
		r := (&http.Request{Method: http.MethodGet, URL: u, Host: k.Host, Header: http.Header{}}).WithContext(ctx)
		p := o.cfg.Policies.Load().Match(policy.Host(r), u.Path)
		if p.SliceSize > 0 || p.Key("http", r) != k.Key {
			continue // keyed by more than the URL, or sliced: left to handoff
		}
		sem <- struct{}{}
		wg.Go(o.cfg.Tasks.Guard("precopy", func() {
			defer func() { <-sem }()
			o.Serve(reply.NewDiscard(), Request{HTTP: r, Key: k.Key, Policy: p, Routes: rt, Now: time.Now(), Hop: Hop{Precopy: true}})
		}))
	}
	wg.Wait()
	o.cfg.Logger.Info("pre-copied hot keys gained in the ring change", "epoch", rt.Epoch.GetEpoch(), "asked", len(list))
}

// peerHotKeys asks m for its hot keys; none when it cannot answer.
func (o *Owner) peerHotKeys(ctx context.Context, m *pb.Member) []*hotkey.Key {
	h := hop.ControlHeader(o.cfg.ID, hop.HotKeysField, strconv.Itoa(hotkey.ListMax))
	req := &http.Request{Method: http.MethodGet, URL: &url.URL{Path: "/"}, Host: "shardcache", Header: h}
	resp, err := o.forward(ctx, m, req, h, handoffTimeout)
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	o.cfg.Metrics.Hot.WithLabelValues("list_asked").Inc()
	if resp.StatusCode != http.StatusOK {
		return nil
	}
	keys, err := hotkey.Decode(resp.Body)
	if err != nil {
		o.cfg.Logger.Warn("refused a peer's hot-key list", "peer", m.GetId(), "err", err)
		return nil
	}
	return keys
}
