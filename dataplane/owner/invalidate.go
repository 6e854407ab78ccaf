package owner

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/shardcache/shardcache/dataplane/hop"
	"github.com/shardcache/shardcache/dataplane/httpcache"
	"github.com/shardcache/shardcache/dataplane/purge"
	"github.com/shardcache/shardcache/dataplane/slice"
	"github.com/shardcache/shardcache/dataplane/store"
	"github.com/shardcache/shardcache/sdk/policy"
	"github.com/shardcache/shardcache/sdk/redact"
)

// Invalidate drops what the cluster stores for the request's target: for
// a client's unsafe request that succeeded (RFC 9111 4.4), its target URI
// and the same-host URIs in the response's Location and Content-Location
// (h), here and on every other member of the ring over the peer hop, where
// the owner and any node holding a hot copy are; it waits up to
// invalidateWait for the peers, so that the client's next request sees the
// change, and a slower peer is still told, after the answer. At most
// Config.MaxInvalidations sends are in flight: past the bound the request
// waits for room, within the same invalidateWait, and what it could not
// send by then is dropped and logged. For a peer's
// invalidation (req.Hop.From set) it drops here only: the slice head it
// names, or its URL.
func (o *Owner) Invalidate(req Request, h http.Header) {
	if req.Hop.From != "" {
		if req.Slice != nil {
			o.drop(req.Key) // one slice's head, as the assembler asks
		} else {
			o.dropURL(req.HTTP, req.Policy)
		}
		return
	}
	r := req.HTTP
	var wg sync.WaitGroup
	// The answer waits for the sends, and for room to send, up to
	// invalidateWait in all.
	wait, cancel := context.WithTimeout(o.cfg.Tasks.Context(), invalidateWait)
	defer cancel()
	dropped := 0
	// The request's URL as it was keyed: its raw path (escapes kept) too.
	base := &url.URL{Scheme: "http", Host: r.Host, Path: r.URL.Path, RawPath: r.URL.RawPath, RawQuery: r.URL.RawQuery}
	targets := []*url.URL{base}
	for _, f := range []string{"Location", "Content-Location"} {
		if v := h.Get(f); v != "" {
			if u, err := base.Parse(v); err == nil && strings.EqualFold(u.Host, base.Host) {
				policy.NormalURL(u) // spelled as a request for it is keyed on arrival
				targets = append(targets, u)
			}
		}
	}
	rt := req.Routes
	for i, u := range targets {
		tr := &http.Request{Method: http.MethodGet, URL: &url.URL{Path: u.Path, RawPath: u.RawPath, RawQuery: u.RawQuery}, Host: u.Host, Header: http.Header{}}
		p := o.cfg.Policies.Load().Match(policy.Host(tr), tr.URL.Path)
		if i > 0 && req.Policy != nil && p.Name != req.Policy.Name {
			// A Location the origin answered (one it may reflect from the
			// request: a login's ?next=) names another policy's content,
			// whose own origin answered nothing: not this origin's to drop.
			continue
		}
		o.dropURL(tr, p)
		if rt == nil {
			continue
		}
		hdr := hop.ControlHeader(o.cfg.ID, hop.InvalidateField, "1")
		share := invalidationShare(cap(o.invalidating), len(rt.Epoch.GetMembers())-1)
		for _, m := range rt.Epoch.GetMembers() {
			if m.GetId() == o.cfg.ID {
				continue
			}
			if !o.peerSend(m.GetId(), +1, share) {
				dropped++
				o.cfg.Metrics.PeerReqs.WithLabelValues(m.GetId(), "dropped").Inc()
				continue
			}
			select {
			case o.invalidating <- struct{}{}:
			case <-wait.Done():
				o.peerSend(m.GetId(), -1, share)
				dropped++
				o.cfg.Metrics.PeerReqs.WithLabelValues(m.GetId(), "dropped").Inc()
				continue
			}
			wg.Add(1)
			o.cfg.Tasks.Go("invalidate", func() {
				defer func() { <-o.invalidating; o.peerSend(m.GetId(), -1, share) }()
				defer wg.Done()
				ctx, cancel := context.WithTimeout(o.cfg.Tasks.Context(), 5*time.Second)
				defer cancel()
				resp, err := o.cfg.Peers.Forward(ctx, m.GetPeerAddress(), tr, hdr)
				if err != nil {
					o.cfg.Logger.Warn("invalidation did not reach a peer", "peer", m.GetId(), "url", redact.Query(u.String()), "err", errText(err))
					return
				}
				resp.Body.Close()
			})
		}
	}
	if dropped > 0 {
		o.cfg.Logger.Warn("invalidations not sent to peers: too many in flight", "url", redact.Query(base.String()), "dropped", dropped,
			"in_flight_max", cap(o.invalidating))
	}
	done := make(chan struct{})
	o.cfg.Tasks.Go("invalidate", func() {
		wg.Wait()
		close(done)
	})
	select {
	case <-done:
	case <-wait.Done():
	}
}

// invalidationShare is how many of bound invalidations in flight one of
// peers may hold: a quarter of them, or an equal part when there are fewer
// than four peers. Every change is sent to every peer, so peers that all
// answer hold equal counts: a burst within the bound fits each one's share,
// as it fit the bound before there were shares (a ring of two nodes has
// one peer, which may hold them all); only a peer that does not answer
// piles up past its share.
func invalidationShare(bound, peers int) int {
	return max(1, bound/min(4, max(1, peers)))
}

// peerSend counts an invalidation to peer in flight (+1), or no longer
// (-1). A count that would pass share, the peer's share of
// MaxInvalidations, is refused: false, nothing counted.
func (o *Owner) peerSend(peer string, d, share int) bool {
	o.peerSendsMu.Lock()
	defer o.peerSendsMu.Unlock()
	n := o.peerSends[peer] + d
	if d > 0 && n > share {
		return false
	}
	if n <= 0 {
		delete(o.peerSends, peer)
	} else {
		o.peerSends[peer] = n
	}
	return true
}

// invalidateWait bounds how long an unsafe request's answer waits for the
// peers to drop what it invalidates.
const invalidateWait = time.Second

// drop removes what this node stores under key: the response or its
// variants, and a hot copy.
func (o *Owner) drop(key string) {
	// A fill of the key still streaming is not joined after this (nor
	// stored: the store's Delete drops it).
	o.flights.ForgetKey(key)
	// The key first: that drops its variants' fills in progress, so a
	// variant stored after this is none of theirs, and one stored
	// before is among the members dropped next.
	if o.cfg.Store.Delete(key) {
		o.notes.Removed(key, httpcache.ReasonInvalidated)
	}
	for _, k := range o.cfg.Store.Members(key) { // its variants, if it varies
		if o.cfg.Store.Delete(k) {
			o.notes.Removed(k, httpcache.ReasonInvalidated)
		}
	}
	if o.cfg.Copies != nil {
		o.cfg.Copies.Delete(key)
	}
}

// dropURL removes what this node stores for req's URL under either
// scheme (an unsafe method changed the resource for both), and a sliced
// object's head.
func (o *Owner) dropURL(req *http.Request, p *policy.Policy) {
	for _, key := range p.URLKeys(req) {
		o.drop(key)
		if p.SliceSize > 0 {
			// Without its head a sliced object is looked up anew; slices
			// of another version are then refused.
			o.drop((&slice.Req{Size: p.SliceSize}).Key(key))
		}
	}
}

// purgeIndex is the store as purges see it: a key a purge deletes is
// noted as purged.
type purgeIndex struct {
	*store.Store
	o *Owner
}

var _ purge.Index = purgeIndex{}

func (p purgeIndex) Delete(key string) bool {
	p.o.flights.ForgetKey(key)
	if !p.Store.Delete(key) {
		return false
	}
	p.o.notes.Removed(key, httpcache.ReasonPurged)
	return true
}
