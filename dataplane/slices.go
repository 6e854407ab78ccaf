package dataplane

import (
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
func (n *Node) sliceOwner(key string, s *slice.Req, p *policy.Policy) *pb.Member {
	rt := n.routes.Load()
	if rt == nil || p.Mode == pb.CacheMode_CACHE_MODE_LOCAL {
		return nil
	}
	o := rt.owner(s.Key(key))
	if o == nil || o.GetId() == n.cfg.ID {
		return nil
	}
	return o
}

// fetchSlice asks slice s's owner for it (method GET or HEAD), or serves
// it in process when this node owns it or the owner cannot be reached.
func (n *Node) fetchSlice(ctx context.Context, r *http.Request, key string, p *policy.Policy, s *slice.Req, method string) *http.Response {
	h := n.relayHeader(r)
	for _, f := range httpcache.ConditionalFields {
		h.Del(f) // the assembling node answers those
	}
	s.SetHeader(h)
	req := (&http.Request{Method: method, URL: r.URL, Host: r.Host, Header: h}).WithContext(ctx)
	if owner := n.sliceOwner(key, s, p); owner != nil {
		// The relay timeout bounds the wait for the answer's header; the
		// body is read at the client's pace.
		resp, err := n.forward(ctx, owner, req, h, n.relayTimeout(p))
		if err == nil {
			return resp
		}
		if ctx.Err() == nil {
			n.log.Warn("slice owner did not answer; serving the slice here", "owner", owner.GetId(), "slice", s.Index, "err", err)
		}
	}
	return n.inProcess(req)
}

// dropSlice removes slice s of the object under key from its owner, so
// that the next request fetches it anew.
func (n *Node) dropSlice(r *http.Request, key string, p *policy.Policy, s *slice.Req) {
	owner := n.sliceOwner(key, s, p)
	if owner == nil {
		n.store.Delete(s.Key(key))
		return
	}
	ctx, cancel := context.WithTimeout(n.fillCtx, 2*time.Second)
	defer cancel()
	h := http.Header{relay.HopHeader: {n.cfg.ID}, relay.InvalidateHeader: {"1"}, relay.SchemeHeader: {"http"}}
	s.SetHeader(h)
	req := &http.Request{Method: http.MethodGet, URL: r.URL, Host: r.Host, Header: h}
	if resp, err := n.peers.Forward(ctx, owner.GetPeerAddress(), req, h); err == nil {
		resp.Body.Close()
	} else {
		n.log.Warn("could not drop a changed object's head", "owner", owner.GetId(), "err", err)
	}
}
