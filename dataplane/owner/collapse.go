package owner

import (
	"cmp"
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/shardcache/shardcache/dataplane/httpcache"
	"github.com/shardcache/shardcache/dataplane/internal/reply"
	"github.com/shardcache/shardcache/dataplane/slice"
	"github.com/shardcache/shardcache/dataplane/store"
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
	reason string // the rule e is served by (stale-if-error, ...)
	err    error
	code   int         // HTTP status for err
	req    http.Header // the leader's request, to check Vary
}

// collapse is the stage that joins concurrent misses of a key into one
// fill: the first request (the leader) fetches, the others wait for what
// it shares, and fetch alone when it cannot be shared (not storable,
// another variant) or takes too long, as nginx's proxy_cache_lock does.
// Under authorize_every_request every request is authorised by the origin
// on its own: none takes another's answer.
func (s *serving) collapse() {
	if s.p.AuthorizeEach {
		s.answerFill(s.fill(nil))
		return
	}
	wait := s.cfg.OriginTimeout
	if s.p.CollapseTimeout > 0 {
		wait = s.p.CollapseTimeout
	}
	started := s.req.Account.Now()
	// The fill is made before it is known to lead: a method value of s
	// would move every request's serving to the heap.
	f := &fill{serving: *s, fk: flightKey(s.key, s.req.Slice)}
	share, ok, led := s.flights.Do(s.r.Context(), wait, f.fk, f.lead)
	if led {
		s.answerFill(f)
		return
	}
	if a := s.req.Account; a != nil {
		a.CollapseWait = time.Since(started)
	}
	if ok && s.serveShare(share) {
		return
	}
	s.answerFill(s.fill(nil))
}

// serveShare answers from a leader's fill; false when the request must
// fetch for itself.
func (s *serving) serveShare(sh *fillShare) bool {
	switch {
	case sh.err != nil:
		// The origin failed: the failure is shared, not retried by each.
		s.originError(sh.code, sh.err, "origin unreachable")
		return true
	case sh.e != nil:
		// The leader's variant, revalidated or served stale: only to a
		// request its Vary fields select as well, and none a purge applied
		// since has removed.
		if !httpcache.SameVariant(httpcache.VaryFields(sh.e.Header), sh.req, s.r.Header) || s.cfg.Bans.Match(sh.e) != nil {
			return false
		}
		s.reason = cmp.Or(sh.reason, s.reason)
		return s.Answer(sh.e, nil, sh.status) == nil
	}
	e := sh.wr.Entry()
	// A fill begun before a purge that matches it (a prefix or tag purge,
	// which its sweep applies once the fill ends) is no answer for a
	// request after the purge.
	if !httpcache.SameVariant(httpcache.VaryFields(e.Header), sh.req, s.r.Header) || s.cfg.Bans.Match(e) != nil {
		return false
	}
	rd, err := sh.wr.NewReader()
	if err == nil {
		defer rd.Close()
		s.cfg.Metrics.Collapsed.Inc()
		s.out.Source = SourceFill
		err = s.Answer(e, rd, cacheCollapsed)
	}
	if err == nil {
		s.keptBy(sh.wr)
		return true
	}
	if errors.Is(err, store.ErrNotStored) {
		return false
	}
	http.Error(s.w, "shardcache: origin response broke off", http.StatusBadGateway)
	return true
}

// revalidateInBackground refreshes e, served stale, with one request of
// its own, unless a fill of the key is already running.
func (s *serving) revalidateInBackground(e *store.Entry) {
	fk := flightKey(s.key, s.req.Slice)
	call, leader := s.flights.Join(fk)
	if !leader {
		return
	}
	breq := background(&s.req)
	breq.From = nil // the origin confirms it, not the first owner
	bg := s.fork(reply.NewDiscard(), breq)
	bg.stale = e
	f, o := &fill{serving: *bg, fk: fk}, s.Owner // the goroutine holds no reference to s
	s.cfg.Tasks.Go("revalidate", func() {
		o.flights.Lead(fk, call, f.lead)
		bg.answerFill(f)
	})
}

// fork is a copy of s for work of its own (a background revalidation, a
// slice served in process), with its own outcome and no account.
func (s *serving) fork(w http.ResponseWriter, req *Request) *serving {
	fs := &serving{Owner: s.Owner, w: w, req: *req, r: req.HTTP, key: req.Key, p: req.Policy, dirs: httpcache.ForRequest(req.HTTP.Header)}
	fs.req.Account = nil
	return fs
}

// background is req for work no client waits on: its context outlives the
// client's.
func background(req *Request) *Request {
	bg := *req
	bg.HTTP = req.HTTP.Clone(context.WithoutCancel(req.HTTP.Context()))
	return &bg
}
