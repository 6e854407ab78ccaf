package owner

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"time"

	"github.com/shardcache/shardcache/dataplane/flight"
	"github.com/shardcache/shardcache/dataplane/hop"
	"github.com/shardcache/shardcache/dataplane/httpcache"
	"github.com/shardcache/shardcache/dataplane/internal/reply"
	"github.com/shardcache/shardcache/dataplane/internal/wait"
	"github.com/shardcache/shardcache/dataplane/metrics"
	"github.com/shardcache/shardcache/dataplane/purge"
	"github.com/shardcache/shardcache/dataplane/slice"
	"github.com/shardcache/shardcache/dataplane/store"
	pb "github.com/shardcache/shardcache/proto/shardcache/v1"
	"github.com/shardcache/shardcache/sdk/policy"
)

// fill fetches key from the origin (or, for a hot key's later owner, from
// the first owner) and answers w. stale, when set, is the stored response
// being revalidated: its validators make the request conditional, a 304
// refreshes it, and an origin failure may serve it (stale-if-error).
//
// A storable response is written to the store by a goroutine of its own,
// which this request and every request collapsed onto it (call, when not
// nil) follow as readers: a client that hangs up or reads slowly delays no
// one else.
//
// A slice (sl set) is fetched with a Range request of its own bytes,
// conditional (If-Range) on the version of the object it belongs to.
//
// A range fill (plan set, partial.go) asks the origin for a range and
// stores the 206 as the key's part.
func (o *Owner) fill(w http.ResponseWriter, r *http.Request, key string, p *policy.Policy, from *pb.Member, call *flight.Call[*fillShare], stale *store.Entry, sl *slice.Req, plan *partPlan) {
	leader := call
	fk := flightKey(key, sl)
	settle := func(s *fillShare) {
		if call != nil {
			o.flights.Settle(fk, call, s, s != nil)
			if s != nil && s.wr == nil {
				// An answer that is not a stream is for those waiting now;
				// later requests look at the store again.
				o.flights.Forget(fk, call)
			}
			call = nil
		}
	}
	defer settle(nil)

	// The fill outlives a client that hangs up (others may be waiting on
	// it), but not the node. The origin timeout bounds the wait for the
	// answer's header and each wait for its body, never the transfer: an
	// object that keeps coming is fetched and stored whole, however long.
	timeout := cmp.Or(p.OriginTimeout, o.cfg.OriginTimeout)
	ctx, watch := wait.Start(context.WithoutCancel(r.Context()), timeout, timeout)
	cancel := watch.Stop
	stop := context.AfterFunc(o.cfg.Tasks.Context(), cancel)
	handed := false
	defer func() {
		if !handed {
			stop()
			cancel()
		}
	}()
	ctx = httptrace.WithClientTrace(ctx, reply.PassInterim(w))
	// Purges wait for fills that began before them; see purge.Sweep.
	endFill := o.cfg.Inflight.Begin()
	defer func() {
		if !handed {
			endFill()
		}
	}()
	var resp *http.Response
	var err error
	if stale == nil && plan == nil {
		if from != nil {
			resp = o.fillFromPeer(ctx, r, from, false)
		} else if prev := o.handoffFrom(key, r); prev != nil {
			resp = o.fillFromPeer(ctx, r, prev, true)
		}
	}
	if resp == nil && r.Header.Get(hop.PrecopyField) != "" {
		return // a pre-copy takes what a peer has, never the origin
	}
	fromOrigin := resp == nil
	requested := time.Now()
	if fromOrigin {
		extra := validators(stale)
		if sl != nil {
			extra = sl.OriginHeader()
		}
		if plan != nil {
			extra = plan.ask
		}
		resp, err = o.cfg.Origin.Fetch(ctx, r, p, true, extra)
	}
	now := time.Now()
	if err != nil || resp.StatusCode >= 500 && stale != nil {
		result := "error"
		if err == nil {
			result = metrics.StatusClass(resp.StatusCode)
		}
		o.cfg.Metrics.OriginReqs.WithLabelValues("fill", result).Inc()
		if stale != nil && !o.unconfirmed(stale) && !p.AuthorizeEach && httpcache.StaleOnError(stale.Age(now), stale.Lifetime, stale.Header, r.Header, p.StaleIfError, p.Targeted...) {
			if resp != nil {
				resp.Body.Close()
			}
			settle(&fillShare{e: stale, status: httpcache.CacheStale})
			o.Answer(w, r, stale, nil, httpcache.CacheStale)
			return
		}
		if err != nil {
			o.cfg.Logger.Warn("origin request failed", "key", key, "err", err)
			code := http.StatusBadGateway
			if stale != nil {
				code = http.StatusGatewayTimeout // a stored response it may not serve
			}
			settle(&fillShare{err: fmt.Errorf("origin unreachable: %w", err), code: code})
			o.originError(w, code, err, "origin unreachable")
			return
		}
	}
	watch.Answered()
	resp.Body = watch.Body(resp.Body)
	defer func() {
		if !handed {
			resp.Body.Close()
		}
	}()
	if fromOrigin {
		o.cfg.Metrics.Totals.OriginRequests.Add(1)
		o.cfg.Metrics.OriginReqs.WithLabelValues("fill", metrics.StatusClass(resp.StatusCode)).Inc()
	}
	httpcache.RemoveHopByHop(resp.Header)
	if sl != nil {
		if err := sl.FromOrigin(resp); err != nil {
			code := http.StatusBadGateway
			if errors.Is(err, slice.ErrChanged) {
				code = http.StatusPreconditionFailed
			} else {
				o.cfg.Logger.Warn("origin answer cannot be sliced", "key", key, "err", err)
			}
			settle(&fillShare{err: err, code: code})
			http.Error(w, "shardcache: "+err.Error(), code)
			return
		}
	}

	if plan != nil && resp.StatusCode != http.StatusOK {
		handed = o.storePart(w, r, key, p, resp, plan, requested, now, func() {
			endFill()
			cancel()
			stop()
			resp.Body.Close()
		})
		return
	}
	if resp.StatusCode == http.StatusNotModified && stale != nil {
		e := o.refreshed(stale, resp, p, r, requested, now)
		settle(&fillShare{e: e, status: httpcache.CacheRevalidated})
		o.Answer(w, r, e, nil, httpcache.CacheRevalidated)
		return
	}
	status := httpcache.CacheMiss
	// A refusal under authorize_every_request says nothing of what is
	// stored: an unauthorised client learns no more than that it was
	// refused.
	if stale != nil && !(p.AuthorizeEach && resp.StatusCode >= 400) {
		status = httpcache.CacheExpired
	}
	maxObject := o.maxObject(p)
	judged := resp.StatusCode
	if sl != nil && judged == http.StatusPartialContent {
		judged = http.StatusOK // a slice is stored as the object would be
	}
	if sl == nil {
		addVary(p, r, resp.Header)
	}
	lifetime, storable := StoreLifetime(p, r, judged, resp.Header, now, maxObject)
	storable = storable && resp.ContentLength <= maxObject
	storeKey := key
	variantDone := noop
	if sl != nil {
		storable = storable && slice.Storable(resp.Header)
	} else if fields := httpcache.VaryFields(resp.Header); storable && len(fields) > 0 {
		storeKey, storable, variantDone = o.variant(key, fields, r, p, now)
	}
	if !storable {
		variantDone()
		settle(nil)
		o.writeResponse(w, r, resp, fromOrigin, status)
		return
	}
	e := &store.Entry{
		Key:        storeKey,
		URL:        purge.EntryURL(r),
		Status:     resp.StatusCode,
		Header:     resp.Header,
		Received:   now,
		InitialAge: httpcache.InitialAge(resp.Header, requested, now),
		Lifetime:   lifetime,
	}
	compress := p.Compress && sl == nil && compressible(resp.Header, resp.ContentLength)
	wr, err := o.cfg.Store.Create(e, resp.ContentLength, compress, maxObject)
	if err != nil {
		// The disk tier does not admit it (full, or failing): serve it unstored.
		variantDone()
		settle(nil)
		o.writeResponse(w, r, resp, fromOrigin, status)
		return
	}
	// A request from the end of the fill on looks at the store again.
	wr.OnFinish(func() {
		o.flights.Forget(fk, leader)
		variantDone() // stored (the store counts it now) or given up
	})
	settle(&fillShare{wr: wr, req: r.Header})
	handed = true
	// The leader's reader is taken before the copy starts: a small body
	// may be copied and refused by the disk tier's admission before the
	// leader would ask, and a reader taken after a refusal has nothing.
	rd, rdErr := wr.NewReader()
	o.cfg.Tasks.Go("fill", func() {
		defer endFill()
		defer cancel()
		defer stop()
		defer resp.Body.Close()
		nb, err := io.Copy(wr, resp.Body)
		if fromOrigin {
			o.cfg.Metrics.OriginBytes.Add(float64(nb))
		}
		if err != nil {
			o.cfg.Logger.Warn("response body broke off; nothing stored", "key", key, "after_bytes", nb, "err", err)
			wr.Abort(err)
			return
		}
		if _, err := wr.Commit(); err != nil {
			o.cfg.Logger.Warn("storing response failed", "key", key, "err", err)
		}
	})
	err = rdErr
	if err == nil {
		defer rd.Close()
		err = o.Answer(w, r, wr.Entry(), rd, status)
	}
	if err != nil {
		o.originError(w, http.StatusBadGateway, err, "origin response broke off")
	}
}

// maxObject is the largest object stored under p.
func (o *Owner) maxObject(p *policy.Policy) int64 {
	if p.MaxObject > 0 {
		return min(p.MaxObject, o.cfg.DiskBytes/2)
	}
	return o.cfg.MaxObjectBytes
}

// validators are the conditional request fields that revalidate e (RFC
// 9111 4.3.1); nil when e is nil or has none.
func validators(e *store.Entry) http.Header {
	if e == nil {
		return nil
	}
	h := http.Header{}
	if et := e.Header.Values("Etag"); len(et) > 0 {
		h["If-None-Match"] = et
	}
	if lm := e.Header.Get("Last-Modified"); lm != "" {
		h.Set("If-Modified-Since", lm)
	}
	return h
}

// refreshed is stale updated by a 304 (RFC 9111 3.2 and 4.3.4): the 304's
// header fields replace the stored ones, except those describing the body,
// and freshness is computed anew. It is stored again; when that fails the
// refreshed entry still answers this request.
func (o *Owner) refreshed(stale *store.Entry, resp *http.Response, p *policy.Policy, r *http.Request, requested, now time.Time) *store.Entry {
	h := stale.Header.Clone()
	for k, v := range resp.Header {
		switch k {
		case "Content-Length", "Content-Encoding", "Content-Range", "Transfer-Encoding", "Content-Type":
			continue
		}
		h[k] = v
	}
	lifetime, _ := StoreLifetime(p, r, stale.Status, h, now, 1<<62)
	meta := &store.Entry{Key: stale.Key, URL: stale.URL, Status: stale.Status, Header: h, Received: now,
		InitialAge: httpcache.InitialAge(h, requested, now), Lifetime: lifetime}
	e, err := o.cfg.Store.Update(stale, meta)
	if err != nil {
		o.cfg.Logger.Warn("storing a revalidated response failed", "key", stale.Key, "err", err)
		m := *stale
		m.Header, m.Received, m.InitialAge, m.Lifetime = meta.Header, meta.Received, meta.InitialAge, meta.Lifetime
		return &m
	}
	return e
}

// StoreLifetime decides by RFC 9111 3 and the policy whether a response
// with status and h, to request r, may be stored, and how long it stays
// fresh: the response's own freshness, else the policy's status or default
// TTL (as nginx's proxy_cache_valid applies only where the response states
// none). A response without freshness is stored only if it can be
// revalidated.
func StoreLifetime(p *policy.Policy, r *http.Request, status int, h http.Header, received time.Time, maxObject int64) (time.Duration, bool) {
	cc, _ := httpcache.ResponseControl(h, p.Targeted...)
	lifetime := httpcache.LifetimeHeuristic(status, h, received, p.Heuristic(status), p.Targeted...)
	policyTTL := false
	explicit := httpcache.Explicit(h, p.Targeted...)
	if !explicit && !cc.Has("no-cache") {
		if ttl, ok := p.StatusTTL(status); ok {
			lifetime, policyTTL = ttl, true
		} else if p.DefaultTTL > 0 {
			lifetime, policyTTL = p.DefaultTTL, true
		}
	}
	// Worth storing only with a lifetime or a validator to serve it with.
	validator := h.Get("ETag") != "" || h.Get("Last-Modified") != ""
	// Under authorize_every_request each use is checked with the origin,
	// so what answered an authorised request may be stored.
	authorized := r.Header.Get("Authorization") != "" && !p.AuthorizeEach
	ok := httpcache.Storable(status, h, authorized, httpcache.Overrides{
		TTL: policyTTL, StorePrivate: p.StorePrivate, StoreSetCookie: p.StoreSetCookie, Excluded: p.Excluded(status), Heuristic: p.Heuristic(status),
	}, p.Targeted...) && (lifetime > 0 || validator) && maxObject > 0
	return lifetime, ok
}

// writeResponse streams a response that is not stored; a range of a 200
// is cut from it as it comes, and the rest is not fetched.
func (o *Owner) writeResponse(w http.ResponseWriter, r *http.Request, resp *http.Response, fromOrigin bool, status string) {
	if rg, ok := passedRange(r, resp); ok {
		e := &store.Entry{Status: resp.StatusCode, Header: resp.Header, Received: time.Now()}
		rd := io.Reader(resp.Body)
		if fromOrigin {
			rd = &countingReader{r: rd, add: o.cfg.Metrics.OriginBytes.Add}
		}
		o.answerFollowing(w, r, e, rd, span{0, resp.ContentLength - 1, resp.ContentLength}, rg, status)
		return
	}
	reply.CopyHeader(w.Header(), resp.Header)
	o.statusHeaders(w.Header(), status, resp.StatusCode)
	w.WriteHeader(resp.StatusCode)
	if r.Method != http.MethodHead {
		nb, _ := reply.Pass(w, resp.Body)
		if fromOrigin {
			o.cfg.Metrics.OriginBytes.Add(float64(nb))
		}
	}
}
