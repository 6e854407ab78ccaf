package owner

import (
	"context"
	"errors"
	"net/http"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/shardcache/shardcache/dataplane/httpcache"
	"github.com/shardcache/shardcache/dataplane/internal/reply"
	"github.com/shardcache/shardcache/dataplane/slice"
	"github.com/shardcache/shardcache/dataplane/store"
	pb "github.com/shardcache/shardcache/proto/shardcache/v1"
	"github.com/shardcache/shardcache/sdk/policy"
)

// flightKey is what concurrent fills of key collapse on: the key, and for
// a slice the version asked for, so that a request for one version never
// waits for another's.
func flightKey(key string, sl *slice.Req) string {
	if sl == nil || sl.Version == "" {
		return key
	}
	return key + "\x00" + sl.Version
}

// fillShare is what a fill's leader gives the requests collapsed onto it:
// a response streaming into the store, a stored entry to serve, or the
// failure they all answer with.
type fillShare struct {
	wr     *store.Writer
	e      *store.Entry
	status string // X-Cache for e
	err    error
	code   int         // HTTP status for err
	req    http.Header // the leader's request, to check Vary
}

// Serve serves key from this node's store or fills it, collapsing
// concurrent misses into one origin request. It follows RFC 9111: request
// and response directives decide whether a stored response is served
// fresh, served stale, or revalidated with the origin first.
//
// from, when set, is the key's first owner: this node is a later owner of a
// hot key and fills from it before going to the origin, so the origin still
// sees one request. sl, when set, is the slice of a large object that key
// names (see slices.go).
func (o *Owner) Serve(w http.ResponseWriter, r *http.Request, key string, p *policy.Policy, from *pb.Member, sl *slice.Req) {
	r = withStatusKey(r, p)
	now := time.Now()
	req := httpcache.ForRequest(r.Header)
	var span trace.Span
	if o.cfg.Tracer != nil {
		_, span = o.cfg.Tracer.Start(r.Context(), "cache.lookup", trace.WithAttributes(attribute.String("shardcache.key", key)))
	}
	stale := o.lookup(key, r)
	if sl != nil && stale != nil && sl.Version != "" && slice.Version(stale.Header) != sl.Version {
		stale = nil // another version of the object: never served for this one
	}
	var decision httpcache.Use
	if stale != nil {
		decision = httpcache.Decide(stale.Age(now), stale.Lifetime, stale.Header, req, p.StaleWhileRevalidate, p.Targeted...)
		if o.unconfirmed(stale) {
			decision = httpcache.UseRevalidate // it may have been purged while the node was cut off
		}
		if p.AuthorizeEach {
			decision = httpcache.UseRevalidate // checked with the client's own credentials first
		}
	}
	if span != nil {
		outcome := "miss"
		if stale != nil {
			outcome = decision.String()
		}
		span.SetAttributes(attribute.String("shardcache.lookup", outcome))
		span.End()
	}
	if stale != nil {
		switch decision {
		case httpcache.UseFresh:
			if o.Answer(w, r, stale, nil, httpcache.CacheHit) == nil {
				return
			}
			stale = nil // the record could not be read (and was discarded)
		case httpcache.UseStale:
			if o.Answer(w, r, stale, nil, httpcache.CacheStale) == nil {
				return
			}
			stale = nil
		case httpcache.UseUpdating:
			if o.Answer(w, r, stale, nil, httpcache.CacheUpdating) == nil {
				o.revalidateInBackground(key, r, p, stale, sl)
				return
			}
			stale = nil
		}
	}
	if stale == nil && sl == nil && o.servePartial(w, r, key, p, req) {
		return // answered from or into the key's stored part (partial.go)
	}
	if req.Has("only-if-cached") {
		// RFC 9111 5.2.1.7: nothing usable without the origin.
		http.Error(w, "shardcache: not cached (only-if-cached)", http.StatusGatewayTimeout)
		return
	}
	if p.AuthorizeEach {
		// Every request is authorised by the origin on its own: none
		// takes another's answer.
		o.fill(w, r, key, p, from, nil, stale, sl, nil)
		return
	}
	call, leader := o.flights.Join(flightKey(key, sl))
	if leader {
		o.fill(w, r, key, p, from, call, stale, sl, nil)
		return
	}
	wait := o.cfg.OriginTimeout
	if p.CollapseTimeout > 0 {
		wait = p.CollapseTimeout
	}
	wctx, cancel := context.WithTimeout(r.Context(), wait)
	o.waiting.Add(1)
	share, ok := call.Wait(wctx)
	o.waiting.Add(-1)
	cancel()
	if ok && o.serveShare(w, r, share) {
		return
	}
	// The leader's response could not be shared (not storable, another
	// variant) or took too long: fetch alone, as nginx's proxy_cache_lock does.
	o.fill(w, r, key, p, from, nil, stale, sl, nil)
}

// serveShare answers a collapsed request from its leader's fill; false when
// the request must fetch for itself.
func (o *Owner) serveShare(w http.ResponseWriter, r *http.Request, s *fillShare) bool {
	switch {
	case s.err != nil:
		// The origin failed: the failure is shared, not retried by each.
		o.originError(w, s.code, s.err, "origin unreachable")
		return true
	case s.e != nil:
		return o.Answer(w, r, s.e, nil, s.status) == nil
	}
	e := s.wr.Entry()
	if !httpcache.SameVariant(httpcache.VaryFields(e.Header), s.req, r.Header) {
		return false
	}
	rd, err := s.wr.NewReader()
	if err == nil {
		defer rd.Close()
		o.cfg.Metrics.Collapsed.Inc()
		err = o.Answer(w, r, e, rd, cacheCollapsed)
	}
	if err == nil {
		return true
	}
	if errors.Is(err, store.ErrNotStored) {
		return false
	}
	http.Error(w, "shardcache: origin response broke off", http.StatusBadGateway)
	return true
}

// revalidateInBackground refreshes a stale entry with one request of its
// own, unless a fill of the key is already running.
func (o *Owner) revalidateInBackground(key string, r *http.Request, p *policy.Policy, stale *store.Entry, sl *slice.Req) {
	call, leader := o.flights.Join(flightKey(key, sl))
	if !leader {
		return
	}
	bg := r.Clone(context.WithoutCancel(r.Context()))
	o.cfg.Tasks.Go("revalidate", func() { o.fill(reply.NewDiscard(), bg, key, p, nil, call, stale, sl, nil) })
}
