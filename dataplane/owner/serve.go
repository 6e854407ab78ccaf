package owner

import (
	"net/http"
	"strconv"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/shardcache/shardcache/dataplane/hop"
	"github.com/shardcache/shardcache/dataplane/httpcache"
	"github.com/shardcache/shardcache/dataplane/internal/notes"
	"github.com/shardcache/shardcache/dataplane/store"
	"github.com/shardcache/shardcache/sdk/policy"
)

// serving is one request on its way through the stages: what they read
// of it, and the outcome they fill in.
type serving struct {
	*Owner
	w   http.ResponseWriter
	req Request
	r   *http.Request // req.HTTP
	key string
	p   *policy.Policy
	// dirs are the request's Cache-Control directives.
	dirs httpcache.Directives
	// stale is the stored response the request found that is not served
	// as it is: revalidated, or replaced. unconfirmed says it may have
	// been purged while the node was cut off from the control plane.
	stale       *store.Entry
	unconfirmed bool
	// reason is the rule that last decided the answer would not be a
	// plain hit (httpcache.Reason*): each stage that decides sets it, and
	// the answer sends it (Cache-Status detail) and returns it
	// (Outcome.Member.Detail).
	reason string
	// passedStale, when set, is the X-Cache of a first owner's answer from
	// a stale copy, passed on unstored (fill.fromPeer): the client is told
	// it was served stale; this node's Cache-Status member says it missed.
	passedStale string
	out         Outcome
}

// Serve answers req: from the store, by a fill, from its slices, or from a
// hot copy, as req asks. It follows RFC 9111: request and response
// directives decide whether a stored response is served fresh, served
// stale, or revalidated with the origin first; concurrent misses collapse
// into one origin request.
//
// A request is taken by value, and the serving value on the stack: a hit
// allocates neither.
func (o *Owner) Serve(w http.ResponseWriter, req Request) Outcome {
	if req.Hop.From != "" {
		// An answer from an owner behind the asking node's purges may hold
		// what it purged: the asker keeps no copy of it (hop.PurgeRevision).
		w.Header().Set(hop.PurgeRevisionField, strconv.FormatInt(o.cfg.Bans.Revision(), 10))
	}
	if req.Assemble {
		// The assembler's fetches keep it beyond this call: on the heap.
		// Its slices are served at once, and keep no account.
		req.Account = nil
		sl := &serving{Owner: o, w: w, req: req, r: req.HTTP, key: req.Key, p: req.Policy, dirs: httpcache.ForRequest(req.HTTP.Header)}
		sl.serveSliced()
		return sl.out
	}
	s := serving{Owner: o, w: w, req: req, r: req.HTTP, key: req.Key, p: req.Policy, dirs: httpcache.ForRequest(req.HTTP.Header)}
	if req.Copy {
		s.serveCopy()
	} else {
		s.serve()
	}
	if m := s.out.Member; m.Detail != "" { // a plain hit notes nothing
		o.notes.Add(req.Key, notes.Note{Cache: m.Cache, Reason: m.Detail, Status: m.Status, Stored: s.out.Kept(), At: time.Now()})
	}
	return s.out
}

// serve is the way through the stages: lookup, decide, then answer what
// is stored, or collapse onto a fill, fetch, admit and answer.
func (s *serving) serve() {
	s.out.Served = true
	var span trace.Span
	if s.cfg.Tracer != nil {
		_, span = s.cfg.Tracer.Start(s.r.Context(), "cache.lookup", trace.WithAttributes(attribute.String("shardcache.key", s.keyShown(s.key))))
	}
	a := s.req.Account
	started := a.Now()
	e := s.lookup()
	use := s.decide(e)
	if a != nil {
		a.Lookup = time.Since(started)
	}
	if span != nil {
		outcome := "miss"
		if e != nil {
			outcome = use.String()
		}
		span.SetAttributes(attribute.String("shardcache.lookup", outcome))
		span.End()
	}
	if e != nil && s.serveStored(e, use) {
		return
	}
	if s.rangeOfPart() && s.servePartial() {
		return // answered from or into the key's stored part (partial.go)
	}
	if s.dirs.Has("only-if-cached") {
		// RFC 9111 5.2.1.7: nothing usable without the origin. A slice's
		// probe (slicesCache) keeps why the slice could not be used: the
		// assembled answer names it.
		if s.req.Slice == nil || s.reason == "" {
			s.reason = httpcache.ReasonOnlyIfCached
		}
		s.statusHeaders(s.w.Header(), httpcache.CacheMiss, 0)
		http.Error(s.w, "shardcache: not cached (only-if-cached)", http.StatusGatewayTimeout)
		return
	}
	s.collapse()
}

// serveStored answers from e when the decision says so; false when e is
// to be revalidated or could not be read (the stages go on to a fill).
func (s *serving) serveStored(e *store.Entry, use httpcache.Use) bool {
	var status string
	switch use {
	case httpcache.UseFresh:
		status = httpcache.CacheHit
	case httpcache.UseStale:
		status = httpcache.CacheStale
	case httpcache.UseUpdating:
		status = httpcache.CacheUpdating
	default:
		s.stale = e
		return false
	}
	if s.Answer(e, nil, status) != nil {
		s.reason = httpcache.ReasonStoreError
		return false // the record could not be read (and was discarded)
	}
	if use == httpcache.UseUpdating {
		s.revalidateInBackground(e)
	}
	return true
}

// rangeOfPart reports whether the request is one partial content may
// answer: a GET with a Range, under a policy that stores parts, of no
// slice and no stored response being revalidated.
func (s *serving) rangeOfPart() bool {
	p := s.p
	// Never a mirror's: a registry's 206 is no content its digest checks.
	return p.PartialContent && !p.AuthorizeEach && s.stale == nil && s.req.Slice == nil && s.req.Registry == nil &&
		s.r.Method == http.MethodGet && s.r.Header.Get("Range") != ""
}
