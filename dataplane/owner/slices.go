package owner

import (
	"cmp"
	"context"
	"net/http"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/shardcache/shardcache/dataplane/hop"
	"github.com/shardcache/shardcache/dataplane/httpcache"
	"github.com/shardcache/shardcache/dataplane/slice"
	pb "github.com/shardcache/shardcache/proto/shardcache/v1"
	"github.com/shardcache/shardcache/sdk/policy"
)

// sliceOwner is the member to ask for slice s of the object under key;
// nil when this node serves it itself.
func (o *Owner) sliceOwner(key string, s *slice.Req, p *policy.Policy) *pb.Member {
	rt := o.cfg.Routes.Load()
	if rt == nil || p.Mode == pb.CacheMode_CACHE_MODE_LOCAL {
		return nil
	}
	m := rt.Owner(s.Key(key))
	if m == nil || m.GetId() == o.cfg.ID {
		return nil
	}
	return m
}

// fetchSlice asks slice s's owner for it (method GET or HEAD), or serves
// it in process when this node owns it or the owner cannot be reached.
func (o *Owner) fetchSlice(ctx context.Context, r *http.Request, key string, p *policy.Policy, s *slice.Req, method string) *http.Response {
	return o.askSlice(ctx, r, key, p, s, method, false)
}

// askSlice is fetchSlice; probe asks only whether the slice is stored
// (HEAD, only-if-cached: nothing is fetched for it).
func (o *Owner) askSlice(ctx context.Context, r *http.Request, key string, p *policy.Policy, s *slice.Req, method string, probe bool) *http.Response {
	h := o.relayHeader(r)
	for _, f := range httpcache.ConditionalFields {
		h.Del(f) // the assembling node answers those
	}
	if probe {
		h["Cache-Control"] = []string{"only-if-cached"}
	}
	s.SetHeader(h)
	req := (&http.Request{Method: method, URL: r.URL, Host: r.Host, Header: h}).WithContext(ctx)
	if owner := o.sliceOwner(key, s, p); owner != nil {
		// The relay timeout bounds the wait for the answer's header; the
		// body is read at the client's pace.
		resp, err := o.forward(ctx, owner, req, h, cmp.Or(p.RelayTimeout, o.cfg.RelayTimeout))
		if err == nil {
			return resp
		}
		if ctx.Err() == nil {
			o.cfg.Logger.Warn("slice owner did not answer; serving the slice here", "owner", owner.GetId(), "slice", s.Index, "err", err)
		}
	}
	return o.inProcess(req)
}

// dropSlice removes slice s of the object under key from its owner, so
// that the next request fetches it anew.
func (o *Owner) dropSlice(r *http.Request, key string, p *policy.Policy, s *slice.Req) {
	owner := o.sliceOwner(key, s, p)
	if owner == nil {
		o.cfg.Store.Delete(s.Key(key))
		return
	}
	ctx, cancel := context.WithTimeout(o.cfg.Tasks.Context(), 2*time.Second)
	defer cancel()
	h := hop.ControlHeader(o.cfg.ID, hop.InvalidateField, "1")
	s.SetHeader(h)
	req := &http.Request{Method: http.MethodGet, URL: r.URL, Host: r.Host, Header: h}
	if resp, err := o.cfg.Peers.Forward(ctx, owner.GetPeerAddress(), req, h); err == nil {
		resp.Body.Close()
	} else {
		o.cfg.Logger.Warn("could not drop a changed object's head", "owner", owner.GetId(), "err", err)
	}
}

// maxProbes bounds the slice probes of one answer running at once.
const maxProbes = 8

// slicesCache is the X-Cache of an answer assembled from the slices in
// plan: HIT when every one is stored, else PARTIAL when some are, MISS
// when none found is. head is the X-Cache of slice 0's answer, when the
// plan uses it. The other slices' owners are asked whether they hold them
// (a HEAD that fetches nothing), a few at a time, until one does not.
func (o *Owner) slicesCache(ctx context.Context, r *http.Request, key string, p *policy.Policy, version string, plan []int64, head string) string {
	var hits, misses atomic.Int32
	if len(plan) > 0 && plan[0] == 0 {
		if head == httpcache.CacheHit {
			hits.Add(1)
		} else {
			misses.Add(1)
		}
		plan = plan[1:]
	}
	pctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var g errgroup.Group
	g.SetLimit(maxProbes)
	for _, i := range plan {
		if misses.Load() > 0 {
			break // not a HIT, whatever the rest holds
		}
		g.Go(func() error {
			resp := o.askSlice(pctx, r, key, p, &slice.Req{Index: i, Size: p.SliceSize, Version: version}, http.MethodHead, true)
			resp.Body.Close()
			if resp.StatusCode < 300 && resp.Header.Get("X-Cache") == httpcache.CacheHit {
				hits.Add(1)
			} else {
				misses.Add(1)
			}
			return nil
		})
	}
	g.Wait()
	switch {
	case misses.Load() == 0:
		return httpcache.CacheHit
	case hits.Load() == 0:
		return httpcache.CacheMiss
	}
	return httpcache.CachePartial
}
