package owner

import (
	"time"

	"github.com/shardcache/shardcache/dataplane/httpcache"
	"github.com/shardcache/shardcache/dataplane/store"
)

// decide is the stage that says what to do with e, the stored response
// found (RFC 9111 4.2, 5.2): serve it fresh or stale, serve it stale while
// it is revalidated, or ask the origin first. Two rules of the cluster's
// come before the RFC's: an entry that may have been purged while the node
// was cut off from the control plane, and every entry under
// authorize_every_request (checked with the client's own credentials), is
// revalidated first; one a soft purge marked is stale from the purge on. A
// nil e is a miss.
func (s *serving) decide(e *store.Entry) httpcache.Use {
	if e == nil {
		return httpcache.UseRevalidate // lookup said why
	}
	s.unconfirmed = s.unconfirmedEntry(e, s.req.Now)
	switch {
	case s.unconfirmed:
		s.reason = httpcache.ReasonCutOff
		return httpcache.UseRevalidate
	case s.p.AuthorizeEach:
		s.reason = httpcache.ReasonAuthorizeEach
		return httpcache.UseRevalidate
	}
	age := e.Age(s.req.Now)
	soft := s.cfg.Bans.Stale(e) != nil
	if soft {
		// Soft-purged: stale from the purge on, served as a stale
		// response is (stale-while-revalidate) and revalidated.
		age = max(age, e.Lifetime)
	} else if ref := s.req.Registry; ref != nil && ref.ByDigest() {
		return httpcache.UseFresh // content by digest never changes: never revalidated
	}
	use, why := httpcache.DecideWhy(age, e.Lifetime, e.Header, s.dirs, s.p.StaleWhileRevalidate, s.p.Targeted...)
	if soft && use != httpcache.UseFresh && use != httpcache.UseStale {
		why = httpcache.ReasonSoftPurged
	}
	s.reason = why
	return use
}

// unconfirmedEntry reports whether e may have been purged while the node
// was cut off from the control plane: the cut longer than the node's
// bound, and e stored (or confirmed by the origin) longer ago than that.
// Such an entry is served only once the origin has confirmed it (a
// conditional request), never stale.
func (o *Owner) unconfirmedEntry(e *store.Entry, now time.Time) bool {
	if o.cfg.CutOff == nil {
		return false
	}
	before, cut := o.cfg.CutOff(now)
	return cut && e.Received.Before(before)
}
