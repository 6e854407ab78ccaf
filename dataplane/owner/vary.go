package owner

import (
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
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
// marker to r's variant; nil when there is none.
func (o *Owner) lookup(key string, r *http.Request) *store.Entry {
	e, ok := o.cfg.Store.Get(key)
	if !ok || !o.Usable(e) {
		return nil
	}
	if e.Status != varyMarker {
		if fields := httpcache.VaryFields(e.Header); len(fields) > 0 {
			return nil // stored before it varied; cannot tell its variant
		}
		return e
	}
	v, ok := o.cfg.Store.Get(httpcache.VariantKey(key, httpcache.VaryFields(e.Header), r.Header))
	if !ok || !o.Usable(v) {
		return nil
	}
	return v
}

// variant returns the key a varying response to r is stored under, and
// writes the URL's marker. It reports false when the URL has its policy's
// number of variants already.
func (o *Owner) variant(key string, fields []string, r *http.Request, p *policy.Policy, now time.Time) (string, bool) {
	vk := httpcache.VariantKey(key, fields, r.Header)
	limit := p.MaxVariants
	if limit <= 0 {
		limit = defaultMaxVariants
	}
	marker, ok := o.cfg.Store.Get(key)
	if !ok || marker.Status != varyMarker || !slices.Equal(httpcache.VaryFields(marker.Header), fields) {
		m := &store.Entry{Key: key, URL: purge.EntryURL(r), Status: varyMarker, Header: http.Header{"Vary": {strings.Join(fields, ", ")}},
			Received: now, Lifetime: 0}
		if err := o.cfg.Store.Put(m, nil); err != nil {
			return "", false
		}
		o.variants.Delete(key)
	}
	if _, ok := o.cfg.Store.Get(vk); ok {
		return vk, true // a refresh of a variant already counted
	}
	c, _ := o.variants.LoadOrStore(key, new(atomic.Int32))
	if c.(*atomic.Int32).Add(1) > int32(limit) {
		c.(*atomic.Int32).Add(-1)
		return "", false
	}
	return vk, true
}
