package front

import (
	"cmp"
	"net/http"
	"net/http/httptrace"
	"time"

	"github.com/shardcache/shardcache/dataplane/hop"
	"github.com/shardcache/shardcache/dataplane/httpcache"
	"github.com/shardcache/shardcache/dataplane/internal/reply"
	"github.com/shardcache/shardcache/dataplane/internal/wait"
	"github.com/shardcache/shardcache/dataplane/metrics"
	"github.com/shardcache/shardcache/dataplane/owner"
)

// bypass forwards a request that must not be cached straight to the origin.
//
// An unsafe method that succeeds invalidates what the cluster stores for
// its target (RFC 9111 4.4).
func (f *Front) bypass(w http.ResponseWriter, req *owner.Request, reason string) owner.Outcome {
	r, p := req.HTTP, req.Policy
	// The origin timeout bounds waiting for the origin, never the transfer:
	// an upload or a download takes as long as it keeps moving. For a
	// request with a body, the origin transport's header timeout, which
	// starts once the body is sent, bounds the wait for the answer.
	timeout := cmp.Or(p.OriginTimeout, f.cfg.OriginTimeout)
	first := timeout
	if r.ContentLength != 0 {
		first = 0
	}
	ctx, watch := wait.Start(r.Context(), first, timeout)
	defer watch.Stop()
	sent := req.Account.Now()
	resp, err := f.cfg.Origin.Fetch(httptrace.WithClientTrace(ctx, reply.PassInterim(w)), r, p, false, nil)
	if a := req.Account; a != nil {
		a.OriginFirstByte = time.Since(sent)
		a.Record(owner.CallOrigin, "", resp, err, a.OriginFirstByte)
	}
	// Cache-Status says why the request went forward (RFC 9211 2.2).
	m := httpcache.StatusMember{Node: f.statusName, Cache: httpcache.CacheBypass, Detail: reason}
	switch reason {
	case httpcache.ReasonMethod:
		m.Cache = "METHOD"
	case httpcache.ReasonRequestNoStore:
		m.Cache = "REQUEST"
	}
	if err != nil && bodyStalled(r) {
		http.Error(w, "shardcache: the request body stopped coming (client body timeout)", http.StatusRequestTimeout)
		return owner.Outcome{Served: true, Member: httpcache.StatusMember{Cache: httpcache.CacheBypass, Detail: reason}}
	}
	if err != nil {
		f.cfg.Metrics.OriginReqs.WithLabelValues("bypass", "error").Inc()
		w.Header()["Cache-Status"] = []string{m.String()}
		w.Header()["Proxy-Status"] = []string{httpcache.ProxyStatus(f.statusName, httpcache.ErrorType(err), httpcache.ErrorDetails(err))}
		http.Error(w, "shardcache: origin unreachable", http.StatusBadGateway)
		m.Cache = httpcache.CacheBypass
		return owner.Outcome{Served: true, Member: m}
	}
	watch.Answered()
	resp.Body = watch.Body(resp.Body)
	defer resp.Body.Close()
	f.cfg.Metrics.OriginReqs.WithLabelValues("bypass", metrics.StatusClass(resp.StatusCode)).Inc()
	f.cfg.Metrics.Totals.OriginRequests.Add(1) // origin traffic, for the offload figure
	httpcache.RemoveHopByHop(resp.Header)
	hop.Strip(resp.Header, nil) // the node's internal fields are its own, never an origin's
	reply.CopyHeader(w.Header(), resp.Header)
	w.Header().Set("X-Cache", httpcache.CacheBypass)
	m.Status = resp.StatusCode
	w.Header().Add("Cache-Status", m.String())
	if unsafeMethod(r.Method) && resp.StatusCode < 400 {
		f.cfg.Owner.Invalidate(*req, resp.Header)
	}
	w.WriteHeader(resp.StatusCode)
	reply.Pass(w, resp.Body)
	m.Cache = httpcache.CacheBypass // its X-Cache, as the metrics count it
	return owner.Outcome{Served: true, Source: owner.SourceOrigin, Member: m}
}

// unsafeMethod reports whether m may change the resource (RFC 9110 9.2.1):
// its success invalidates what the cluster stores for it.
func unsafeMethod(m string) bool {
	switch m {
	case http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace:
		return false
	}
	return true
}
