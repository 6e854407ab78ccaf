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
)

// sliceOwner is the member to ask for slice sl of the object; nil when
// this node serves it itself.
func (s *serving) sliceOwner(sl *slice.Req) *pb.Member {
	rt := s.req.Routes
	if rt == nil || s.p.Mode == pb.CacheMode_CACHE_MODE_LOCAL {
		return nil
	}
	m := rt.Owner(sl.Key(s.key))
	if m == nil || m.GetId() == s.cfg.ID {
		return nil
	}
	return m
}

// fetchSlice asks slice sl's owner for it (method GET or HEAD), or serves
// it in process when this node owns it or the owner cannot be reached.
func (s *serving) fetchSlice(ctx context.Context, sl *slice.Req, method string) *http.Response {
	return s.askSlice(ctx, sl, method, false)
}

// askSlice is fetchSlice; probe asks only whether the slice is stored
// (HEAD, only-if-cached: nothing is fetched for it).
func (s *serving) askSlice(ctx context.Context, sl *slice.Req, method string, probe bool) *http.Response {
	r, p := s.r, s.p
	h := relayHeader(&s.req, s.cfg.ID)
	for _, f := range httpcache.ConditionalFields {
		h.Del(f) // the assembling node answers those
	}
	if probe {
		h["Cache-Control"] = []string{"only-if-cached"}
	}
	sl.SetHeader(h)
	req := (&http.Request{Method: method, URL: r.URL, Host: r.Host, Header: h}).WithContext(ctx)
	if m := s.sliceOwner(sl); m != nil {
		// The relay timeout bounds the wait for the answer's header; the
		// body is read at the client's pace.
		resp, err := s.forward(ctx, m, req, h, cmp.Or(p.RelayTimeout, s.cfg.RelayTimeout))
		if err == nil {
			return resp
		}
		if ctx.Err() == nil {
			s.cfg.Logger.Warn("slice owner did not answer; serving the slice here", "owner", m.GetId(), "slice", sl.Index, "err", err)
		}
	}
	return s.inProcess(req, sl)
}

// dropSlice removes slice sl of the object from its owner, so that the
// next request fetches it anew.
func (s *serving) dropSlice(sl *slice.Req) {
	m := s.sliceOwner(sl)
	if m == nil {
		s.cfg.Store.Delete(sl.Key(s.key))
		return
	}
	ctx, cancel := context.WithTimeout(s.cfg.Tasks.Context(), 2*time.Second)
	defer cancel()
	h := hop.ControlHeader(s.cfg.ID, hop.InvalidateField, "1")
	sl.SetHeader(h)
	req := &http.Request{Method: http.MethodGet, URL: s.r.URL, Host: s.r.Host, Header: h}
	if resp, err := s.cfg.Peers.Forward(ctx, m.GetPeerAddress(), req, h); err == nil {
		resp.Body.Close()
	} else {
		s.cfg.Logger.Warn("could not drop a changed object's head", "owner", m.GetId(), "err", err)
	}
}

// maxProbes bounds the slice probes of one answer running at once.
const maxProbes = 8

// slicesCache is the X-Cache of an answer assembled from the slices in
// plan: HIT when every one is stored, else PARTIAL when some are, MISS
// when none found is; and, unless a HIT, the reason of the first slice in
// plan that could not be used (slicedReason). head is slice 0's answer,
// used when the plan starts with it. The other slices' owners are asked
// whether they hold them (a HEAD that fetches nothing), a few at a time,
// until one does not.
func (s *serving) slicesCache(ctx context.Context, version string, plan []int64, head http.Header) (string, string) {
	var hits, misses atomic.Int32
	whys := make([]string, len(plan)) // by plan position, so that the first is told
	if plan[0] == 0 {
		if head.Get("X-Cache") == httpcache.CacheHit {
			hits.Add(1)
		} else {
			misses.Add(1)
			whys[0] = slicedReason(head)
		}
	}
	pctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var g errgroup.Group
	g.SetLimit(maxProbes)
	for k, i := range plan {
		if k == 0 && i == 0 {
			continue // the head: counted above
		}
		if misses.Load() > 0 {
			break // not a HIT, whatever the rest holds
		}
		g.Go(func() error {
			resp := s.askSlice(pctx, &slice.Req{Index: i, Size: s.p.SliceSize, Version: version}, http.MethodHead, true)
			resp.Body.Close()
			if resp.StatusCode < 300 && resp.Header.Get("X-Cache") == httpcache.CacheHit {
				hits.Add(1)
			} else {
				whys[k] = slicedReason(resp.Header)
				misses.Add(1)
			}
			return nil
		})
	}
	g.Wait()
	var why string
	for _, w := range whys {
		if why = w; why != "" {
			break
		}
	}
	switch {
	case misses.Load() == 0:
		return httpcache.CacheHit, ""
	case hits.Load() == 0:
		return httpcache.CacheMiss, why
	}
	return httpcache.CachePartial, why
}
