package dataplane

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/shardcache/shardcache/dataplane/httpcache"
	"github.com/shardcache/shardcache/dataplane/purge"
	"github.com/shardcache/shardcache/dataplane/relay"
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

// serveOwned serves key from this node's store or fills it, collapsing
// concurrent misses into one origin request. It follows RFC 9111: request
// and response directives decide whether a stored response is served
// fresh, served stale, or revalidated with the origin first.
//
// from, when set, is the key's first owner: this node is a later owner of a
// hot key and fills from it before going to the origin, so the origin still
// sees one request. sl, when set, is the slice of a large object that key
// names (see slices.go).
func (n *Node) serveOwned(w http.ResponseWriter, r *http.Request, key string, p *policy.Policy, from *pb.Member, sl *slice.Req) {
	now := time.Now()
	req := httpcache.ForRequest(r.Header)
	var span trace.Span
	if n.tracer != nil {
		_, span = n.tracer.Start(r.Context(), "cache.lookup", trace.WithAttributes(attribute.String("shardcache.key", key)))
	}
	stale := n.lookup(key, r)
	if sl != nil && stale != nil && sl.Version != "" && slice.Version(stale.Header) != sl.Version {
		stale = nil // another version of the object: never served for this one
	}
	var decision use
	if stale != nil {
		decision = n.decide(stale, req, p, now)
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
		case useFresh:
			if n.answer(w, r, stale, nil, relay.CacheHit) == nil {
				return
			}
			stale = nil // the record could not be read (and was discarded)
		case useStale:
			if n.answer(w, r, stale, nil, relay.CacheStale) == nil {
				return
			}
			stale = nil
		case useUpdating:
			if n.answer(w, r, stale, nil, relay.CacheUpdating) == nil {
				n.revalidateInBackground(key, r, p, stale, sl)
				return
			}
			stale = nil
		}
	}
	if req.Has("only-if-cached") {
		// RFC 9111 5.2.1.7: nothing usable without the origin.
		http.Error(w, "shardcache: not cached (only-if-cached)", http.StatusGatewayTimeout)
		return
	}
	call, leader := n.flights.Join(flightKey(key, sl))
	if leader {
		n.fill(w, r, key, p, from, call, stale, sl)
		return
	}
	wait := n.cfg.OriginTimeout
	if p.CollapseTimeout > 0 {
		wait = p.CollapseTimeout
	}
	wctx, cancel := context.WithTimeout(r.Context(), wait)
	n.waiting.Add(1)
	share, ok := call.Wait(wctx)
	n.waiting.Add(-1)
	cancel()
	if ok && n.serveShare(w, r, share) {
		return
	}
	// The leader's response could not be shared (not storable, another
	// variant) or took too long: fetch alone, as nginx's proxy_cache_lock does.
	n.fill(w, r, key, p, from, nil, stale, sl)
}

// serveShare answers a collapsed request from its leader's fill; false when
// the request must fetch for itself.
func (n *Node) serveShare(w http.ResponseWriter, r *http.Request, s *fillShare) bool {
	switch {
	case s.err != nil:
		// The origin failed: the failure is shared, not retried by each.
		http.Error(w, "shardcache: "+s.err.Error(), s.code)
		return true
	case s.e != nil:
		return n.answer(w, r, s.e, nil, s.status) == nil
	}
	e := s.wr.Entry()
	if !httpcache.SameVariant(httpcache.VaryFields(e.Header), s.req, r.Header) {
		return false
	}
	rd, err := s.wr.NewReader()
	if err == nil {
		defer rd.Close()
		n.metrics.collapsed.Inc()
		err = n.answer(w, r, e, rd, relay.CacheHit)
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

// use is what to do with a stored response.
type use int

const (
	useFresh      use = iota // serve it
	useStale                 // serve it stale: the client allows it
	useUpdating              // serve it stale and revalidate in the background
	useRevalidate            // ask the origin first
)

func (u use) String() string {
	return [...]string{"fresh", "stale", "updating", "revalidate"}[u]
}

// decide applies RFC 9111 4.2 and 5.2 to a stored response and a request.
func (n *Node) decide(e *store.Entry, req httpcache.Directives, p *policy.Policy, now time.Time) use {
	age, life := e.Age(now), e.Lifetime
	if age < life {
		ok := !req.Has("no-cache")
		if req.Has("max-age") {
			// An invalid max-age is taken as 0: revalidate (RFC 9111 4.2.1).
			maxAge, _ := req.Seconds("max-age")
			ok = ok && age <= maxAge
		}
		if minFresh, valid := req.Seconds("min-fresh"); valid && life-age < minFresh {
			ok = false
		}
		if ok {
			return useFresh
		}
		return useRevalidate
	}
	// Only a stale response needs its own directives read.
	resp := httpcache.ParseCacheControl(e.Header)
	if resp.MustRevalidate() || req.Has("no-cache") {
		return useRevalidate
	}
	staleness := age - life
	if v, present := req["max-stale"]; present {
		if limit, valid := req.Seconds("max-stale"); v == "" || valid && staleness <= limit {
			return useStale
		}
	}
	swr := p.StaleWhileRevalidate
	if d, ok := resp.Seconds("stale-while-revalidate"); ok {
		swr = d
	}
	if staleness < swr && !req.Has("max-age") && !req.Has("min-fresh") {
		return useUpdating
	}
	return useRevalidate
}

// staleOnError reports whether e may be served when the origin fails
// (stale-if-error in the response or request, or the policy's window).
func (n *Node) staleOnError(e *store.Entry, r *http.Request, p *policy.Policy, now time.Time) bool {
	resp := httpcache.ParseCacheControl(e.Header)
	if resp.MustRevalidate() {
		return false
	}
	window := p.StaleIfError
	if d, ok := resp.Seconds("stale-if-error"); ok {
		window = max(window, d)
	}
	if d, ok := httpcache.ForRequest(r.Header).Seconds("stale-if-error"); ok {
		window = max(window, d)
	}
	return e.Age(now)-e.Lifetime <= window
}

// revalidateInBackground refreshes a stale entry with one request of its
// own, unless a fill of the key is already running.
func (n *Node) revalidateInBackground(key string, r *http.Request, p *policy.Policy, stale *store.Entry, sl *slice.Req) {
	call, leader := n.flights.Join(flightKey(key, sl))
	if !leader {
		return
	}
	bg := r.Clone(context.WithoutCancel(r.Context()))
	n.background("revalidate", func() { n.fill(discard{h: http.Header{}}, bg, key, p, nil, call, stale, sl) })
}

// discard is the ResponseWriter of work no client waits on: a background
// revalidation, a pre-copy.
type discard struct{ h http.Header }

// breaker is a ResponseWriter that can be broken off: whatever is written
// to it after is dropped, and its owner ends the transfer as broken.
type breaker interface{ breakOff() }

// breakOff ends a response whose header is sent so that whoever reads it
// sees a broken transfer, never a short body taken for whole. The writer
// that can tell (the handlers' recorder, whose handler then aborts the
// client's connection; work no client waits on) is told, and the error is
// returned for the caller to stop with. A writer of net/http's own, which
// no handler wrapped, is aborted at once.
func breakOff(w http.ResponseWriter) error {
	for {
		if b, ok := w.(breaker); ok {
			b.breakOff()
			return errBrokenOff
		}
		u, ok := w.(interface{ Unwrap() http.ResponseWriter })
		if !ok {
			panic(http.ErrAbortHandler)
		}
		w = u.Unwrap()
	}
}

// breakOff: nobody reads a discarded answer.
func (discard) breakOff() {}

func (d discard) Header() http.Header         { return d.h }
func (d discard) Write(b []byte) (int, error) { return len(b), nil }
func (d discard) WriteHeader(int)             {}

// Vary (RFC 9111 4.1). A response that varies is stored under a variant
// key (httpcache.VariantKey). Under the URL's key itself a marker (status 0, never served)
// names those fields, so a lookup knows which variant to read.
const (
	varyMarker = 0
	// defaultMaxVariants bounds the variants stored per URL when the
	// policy does not.
	defaultMaxVariants = 16
)

// lookup returns the stored response for r under key, following a Vary
// marker to r's variant; nil when there is none.
func (n *Node) lookup(key string, r *http.Request) *store.Entry {
	e, ok := n.store.Get(key)
	if !ok || !n.usable(e) {
		return nil
	}
	if e.Status != varyMarker {
		if fields := httpcache.VaryFields(e.Header); len(fields) > 0 {
			return nil // stored before it varied; cannot tell its variant
		}
		return e
	}
	v, ok := n.store.Get(httpcache.VariantKey(key, httpcache.VaryFields(e.Header), r.Header))
	if !ok || !n.usable(v) {
		return nil
	}
	return v
}

// variant returns the key a varying response to r is stored under, and
// writes the URL's marker. It reports false when the URL has its policy's
// number of variants already.
func (n *Node) variant(key string, fields []string, r *http.Request, p *policy.Policy, now time.Time) (string, bool) {
	vk := httpcache.VariantKey(key, fields, r.Header)
	limit := p.MaxVariants
	if limit <= 0 {
		limit = defaultMaxVariants
	}
	marker, ok := n.store.Get(key)
	if !ok || marker.Status != varyMarker || !slices.Equal(httpcache.VaryFields(marker.Header), fields) {
		m := &store.Entry{Key: key, URL: purge.EntryURL(r), Status: varyMarker, Header: http.Header{"Vary": {strings.Join(fields, ", ")}},
			Received: now, Lifetime: 0}
		if err := n.store.Put(m, nil); err != nil {
			return "", false
		}
		n.variants.Delete(key)
	}
	if _, ok := n.store.Get(vk); ok {
		return vk, true // a refresh of a variant already counted
	}
	c, _ := n.variants.LoadOrStore(key, new(atomic.Int32))
	if c.(*atomic.Int32).Add(1) > int32(limit) {
		c.(*atomic.Int32).Add(-1)
		return "", false
	}
	return vk, true
}
