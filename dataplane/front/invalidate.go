package front

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/shardcache/shardcache/dataplane/hop"
	"github.com/shardcache/shardcache/dataplane/slice"
	"github.com/shardcache/shardcache/sdk/policy"
)

func unsafeMethod(m string) bool {
	switch m {
	case http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace:
		return false
	}
	return true
}

// invalidate drops what the cluster stores for r's target URI and the
// same-host URIs in the response's Location and Content-Location (RFC
// 9111 4.4): here, and on every other member of the ring over the peer
// hop, where the owner and any node holding a hot copy are. It waits up to
// invalidateWait for the peers, so that the client's next request sees the
// change; a slower peer is still told, after the answer.
func (f *Front) invalidate(r *http.Request, h http.Header) {
	var wg sync.WaitGroup
	base := &url.URL{Scheme: "http", Host: r.Host, Path: r.URL.Path, RawQuery: r.URL.RawQuery}
	targets := []*url.URL{base}
	for _, f := range []string{"Location", "Content-Location"} {
		if v := h.Get(f); v != "" {
			if u, err := base.Parse(v); err == nil && strings.EqualFold(u.Host, base.Host) {
				targets = append(targets, u)
			}
		}
	}
	rt := f.cfg.Routes.Load()
	for _, u := range targets {
		req := &http.Request{Method: http.MethodGet, URL: &url.URL{Path: u.Path, RawQuery: u.RawQuery}, Host: u.Host, Header: http.Header{}}
		p := f.cfg.Policies.Load().Match(policy.Host(req), req.URL.Path)
		f.dropURL(req, p)
		if rt == nil {
			continue
		}
		hdr := hop.ControlHeader(f.cfg.ID, hop.InvalidateField, "1")
		for _, m := range rt.Epoch.GetMembers() {
			if m.GetId() == f.cfg.ID {
				continue
			}
			wg.Add(1)
			f.cfg.Tasks.Go("invalidate", func() {
				defer wg.Done()
				ctx, cancel := context.WithTimeout(f.cfg.Tasks.Context(), 5*time.Second)
				defer cancel()
				resp, err := f.cfg.Peers.Forward(ctx, m.GetPeerAddress(), req, hdr)
				if err != nil {
					f.cfg.Logger.Warn("invalidation did not reach a peer", "peer", m.GetId(), "url", u.String(), "err", err)
					return
				}
				resp.Body.Close()
			})
		}
	}
	done := make(chan struct{})
	f.cfg.Tasks.Go("invalidate", func() {
		wg.Wait()
		close(done)
	})
	select {
	case <-done:
	case <-time.After(invalidateWait):
	}
}

// invalidateWait bounds how long an unsafe request's answer waits for the
// peers to drop what it invalidates.
const invalidateWait = time.Second

// drop removes what this node stores under key: the owner's response or
// its variants, and a hot copy.
func (f *Front) drop(key string) {
	f.cfg.Owner.Drop(key)
	if f.cfg.HotCopies != nil {
		f.cfg.HotCopies.Delete(key)
	}
}

// dropURL removes what this node stores for req's URL under either
// scheme (an unsafe method changed the resource for both), and a sliced
// object's head.
func (f *Front) dropURL(req *http.Request, p *policy.Policy) {
	for _, key := range p.URLKeys(req) {
		f.drop(key)
		if p.SliceSize > 0 {
			// Without its head a sliced object is looked up anew; slices
			// of another version are then refused.
			f.drop((&slice.Req{Size: p.SliceSize}).Key(key))
		}
	}
}
