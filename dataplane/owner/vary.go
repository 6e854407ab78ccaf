package owner

import (
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/shardcache/shardcache/dataplane/httpcache"
	"github.com/shardcache/shardcache/dataplane/purge"
	"github.com/shardcache/shardcache/dataplane/store"
	"github.com/shardcache/shardcache/sdk/policy"
)

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
// marker to r's variant; nil when there is none, or when it is coded in a
// way r does not accept.
func (o *Owner) lookup(key string, r *http.Request) *store.Entry {
	e := o.find(key, r)
	if e != nil && !httpcache.AcceptsAll(r.Header, e.Header.Get("Content-Encoding")) {
		return nil
	}
	return e
}

func (o *Owner) find(key string, r *http.Request) *store.Entry {
	e, ok := o.cfg.Store.Get(key)
	if !ok || !o.usable(e) {
		return nil
	}
	if e.Status != varyMarker {
		if fields := httpcache.VaryFields(e.Header); len(fields) > 0 {
			return nil // stored before it varied; cannot tell its variant
		}
		return e
	}
	fields := httpcache.VaryFields(e.Header)
	v, ok := o.cfg.Store.Get(httpcache.VariantKey(key, fields, r.Header))
	if !ok || !o.usable(v) {
		if slices.Equal(fields, []string{"accept-language"}) {
			return o.languageVariant(key, r)
		}
		return nil
	}
	return v
}

// languageVariant returns a stored variant of key, varying on
// Accept-Language alone, whose Content-Language is exactly the language r
// prefers: the answer the origin negotiated for another client's list is
// the one it gives for that language.
func (o *Owner) languageVariant(key string, r *http.Request) *store.Entry {
	want, ok := httpcache.PreferredLanguage(r.Header)
	if !ok {
		return nil
	}
	for _, k := range o.cfg.Store.Members(key) {
		v, ok := o.cfg.Store.Peek(k)
		if ok && o.usable(v) && v.Status != http.StatusPartialContent && strings.EqualFold(strings.TrimSpace(v.Header.Get("Content-Language")), want) {
			if v, ok := o.cfg.Store.Get(k); ok {
				return v
			}
		}
	}
	return nil
}

// variant returns the key a varying response to r is stored under, and
// writes the URL's marker. It reports false when the URL has its policy's
// number of variants already, stored or being filled. A new variant's slot
// is held until done is called, once its fill has stored it or given up.
func (o *Owner) variant(key string, fields []string, r *http.Request, p *policy.Policy, now time.Time) (vk string, ok bool, done func()) {
	vk = httpcache.VariantKey(key, fields, r.Header)
	limit := p.MaxVariants
	if limit <= 0 {
		limit = defaultMaxVariants
	}
	marker, found := o.cfg.Store.Get(key)
	if !found || marker.Status != varyMarker || !slices.Equal(httpcache.VaryFields(marker.Header), fields) {
		m := &store.Entry{Key: key, URL: purge.EntryURL(r), Status: varyMarker, Header: http.Header{"Vary": {strings.Join(fields, ", ")}},
			Received: now, Lifetime: 0}
		if err := o.cfg.Store.Put(m, nil); err != nil {
			return "", false, noop
		}
	}
	if _, found := o.cfg.Store.Get(vk); found {
		return vk, true, noop // a refresh of a variant already counted
	}
	stored := o.cfg.Store.Count(key)
	if _, ok := o.cfg.Store.Peek(PartKey(key)); ok {
		stored-- // a stored range (partial.go) is among the key's group, but is no variant
	}
	o.fillingMu.Lock()
	defer o.fillingMu.Unlock()
	if stored+o.filling[key] >= limit {
		return "", false, noop
	}
	o.filling[key]++
	return vk, true, func() {
		o.fillingMu.Lock()
		defer o.fillingMu.Unlock()
		if o.filling[key]--; o.filling[key] <= 0 {
			delete(o.filling, key)
		}
	}
}

func noop() {}
