package owner

import (
	"net/http"
	"slices"
	"strings"

	"github.com/shardcache/shardcache/dataplane/httpcache"
	"github.com/shardcache/shardcache/dataplane/slice"
	"github.com/shardcache/shardcache/dataplane/store"
)

// Vary (RFC 9111 4.1). A response that varies is stored under a variant
// key (httpcache.VariantKey). Under the URL's key itself a marker (status
// 0, never served) names those fields, so a lookup knows which variant to
// read.
const varyMarker = 0

// lookup is the stage that finds the stored response for the request:
// under its key, following a Vary marker to its variant; nil when there is
// none, when no purge allows it, when it is coded in a way the request
// does not accept, or when it is another version of the object than the
// slice asked for belongs to.
//
// Each nil says why (s.reason).
func (s *serving) lookup() *store.Entry {
	e := s.find(s.key)
	if e == nil {
		return nil
	}
	if !httpcache.AcceptsAll(s.r.Header, httpcache.ContentCoding(e.Header)) {
		s.reason = httpcache.ReasonEncoding
		return nil
	}
	if sl := s.req.Slice; sl != nil && sl.Version != "" && slice.Version(e.Header) != sl.Version {
		s.reason = httpcache.ReasonSliceVersion
		return nil // another version of the object: never served for this one
	}
	return e
}

// languageOnly is the Vary of a response negotiated by language alone.
var languageOnly = []string{"accept-language"}

// find is key's stored response for the request, its Vary followed; nil
// saying why (s.reason).
func (s *serving) find(key string) *store.Entry {
	e, ok := s.cfg.Store.Get(key)
	if !ok {
		s.reason = s.notes.MissReason(key, httpcache.ReasonURIMiss)
		return nil
	}
	if why := s.unusable(e); why != "" {
		s.reason = why
		return nil
	}
	if e.Status != varyMarker {
		if fields := httpcache.VaryFields(e.Header); len(fields) > 0 {
			s.reason = httpcache.ReasonVaryMiss
			return nil // stored before it varied; cannot tell its variant
		}
		return e
	}
	fields := httpcache.VaryFields(e.Header)
	vk := httpcache.VariantKey(key, fields, s.r.Header)
	v, ok := s.cfg.Store.Get(vk)
	if !ok || !s.usable(v) {
		if slices.Equal(fields, languageOnly) {
			if v := s.languageVariant(key); v != nil {
				return v
			}
		}
		if ok {
			s.reason = s.unusable(v)
		} else {
			s.reason = s.notes.MissReason(vk, httpcache.ReasonVaryMiss)
		}
		return nil
	}
	return v
}

// languageVariant returns a stored variant of key, varying on
// Accept-Language alone, whose Content-Language is exactly the language
// the request prefers: the answer the origin negotiated for another
// client's list is the one it gives for that language. A variant stored
// while the URL varied on more (Accept-Language and Cookie: a signed-in
// page) is never one: its own Vary says whose it is.
func (s *serving) languageVariant(key string) *store.Entry {
	want, ok := httpcache.PreferredLanguage(s.r.Header)
	if !ok {
		return nil
	}
	for _, k := range s.cfg.Store.Members(key) {
		v, ok := s.cfg.Store.Peek(k)
		if ok && s.usable(v) && v.Status != http.StatusPartialContent && slices.Equal(httpcache.VaryFields(v.Header), languageOnly) &&
			strings.EqualFold(strings.TrimSpace(v.Header.Get("Content-Language")), want) {
			if v, ok := s.cfg.Store.Get(k); ok {
				return v
			}
		}
	}
	return nil
}

// usable reports whether a stored entry may be served: no ban matches it,
// and, until the first session of this run has brought the purges the
// node missed, it was stored by this run.
func (o *Owner) usable(e *store.Entry) bool { return o.unusable(e) == "" }

// unusable is why a stored entry may not be served (a Reason), or "".
func (o *Owner) unusable(e *store.Entry) string {
	if !o.caughtUp.Load() && e.Received.Before(o.started) {
		return httpcache.ReasonCatchingUp
	}
	if o.cfg.Bans.Match(e) != nil {
		return httpcache.ReasonPurged
	}
	return ""
}
