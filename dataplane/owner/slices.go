package owner

import (
	"cmp"
	"context"
	"net/http"
	"time"

	"github.com/shardcache/shardcache/dataplane/httpcache"
	"github.com/shardcache/shardcache/dataplane/relay"
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
	h := o.relayHeader(r)
	for _, f := range httpcache.ConditionalFields {
		h.Del(f) // the assembling node answers those
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
	h := relay.ControlHeader(o.cfg.ID, relay.InvalidateHeader, "1")
	s.SetHeader(h)
	req := &http.Request{Method: http.MethodGet, URL: r.URL, Host: r.Host, Header: h}
	if resp, err := o.cfg.Peers.Forward(ctx, owner.GetPeerAddress(), req, h); err == nil {
		resp.Body.Close()
	} else {
		o.cfg.Logger.Warn("could not drop a changed object's head", "owner", owner.GetId(), "err", err)
	}
}
