package owner

import (
	"errors"
	"io"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/shardcache/shardcache/dataplane/httpcache"
	"github.com/shardcache/shardcache/dataplane/internal/reply"
	"github.com/shardcache/shardcache/dataplane/purge"
	"github.com/shardcache/shardcache/dataplane/slice"
	"github.com/shardcache/shardcache/dataplane/store"
	"github.com/shardcache/shardcache/sdk/policy"
)

// defaultMaxVariants bounds the variants stored per URL when the policy
// does not.
const defaultMaxVariants = 16

// admit is the stage that decides what the fetched response becomes: a
// stored part (a range fill's 206, partial.go), a stored response
// refreshed (a 304 to a revalidation), a new stored response (or
// variant) streaming into the store as it is answered, or an answer that
// is not stored (not storable, over a bound, refused by the disk tier, a
// first owner's stale copy).
func (f *fill) admit() {
	resp := f.resp
	if f.passedStale != "" {
		f.settle(nil)
		f.then = leadAnswer{kind: answerUnstored, status: httpcache.CacheMiss}
		return
	}
	if f.plan != nil && resp.StatusCode != http.StatusOK {
		f.handed = f.storePart()
		return
	}
	if resp.StatusCode == http.StatusNotModified && f.stale != nil {
		answer, kept := f.refreshed()
		if kept != nil {
			f.settle(&fillShare{e: kept, status: httpcache.CacheRevalidated, req: f.r.Header})
		} else {
			f.settle(nil) // nothing stored: each waiting request asks on its own
		}
		f.then = leadAnswer{kind: answerEntry, e: answer, status: httpcache.CacheRevalidated}
		return
	}
	status := httpcache.CacheMiss
	// A refusal under authorize_every_request says nothing of what is
	// stored: an unauthorised client learns no more than that it was
	// refused.
	if f.stale != nil && !(f.p.AuthorizeEach && resp.StatusCode >= 400) {
		status = httpcache.CacheExpired
	}
	storeKey, lifetime, done, ok := f.storable()
	if !ok {
		f.settle(nil)
		f.then = leadAnswer{kind: answerUnstored, status: status}
		return
	}
	e := &store.Entry{Key: storeKey, URL: purge.EntryURL(f.r), Status: resp.StatusCode, Header: resp.Header, Received: f.received,
		InitialAge: httpcache.InitialAge(resp.Header, f.requested, f.received), Lifetime: lifetime}
	compress := f.p.Compress && f.req.Slice == nil && httpcache.Compressible(resp.Header, resp.ContentLength)
	wr, rd, err := f.cfg.Store.CreateRead(e, resp.ContentLength, compress, f.maxObject(f.p))
	if err != nil {
		// The disk tier does not admit it (full, or failing): serve it unstored.
		// (Its admission, which may refuse it too, decides as the fill
		// ends: keptBy.)
		f.reason = httpcache.ReasonStoreError
		if errors.Is(err, store.ErrNoSpace) {
			f.reason = httpcache.ReasonAdmission
		}
		done()
		f.settle(nil)
		f.then = leadAnswer{kind: answerUnstored, status: status}
		return
	}
	f.stream(wr, rd, done, status)
}

// judged is the status the response is judged storable by: a slice's 206
// is stored as the object's 200 would be.
func (f *fill) judged() int {
	if f.req.Slice != nil && f.resp.StatusCode == http.StatusPartialContent {
		return http.StatusOK
	}
	return f.resp.StatusCode
}

// storable says whether the response is stored, for how long it is
// fresh, and under which key (a variant's, for a response that varies);
// done releases the variant's slot once its fill has stored it or given
// up. The fields the policy says the origin varies on without naming them
// are added to its Vary first. A response not stored says why (f.reason).
func (f *fill) storable() (key string, lifetime time.Duration, done func(), ok bool) {
	resp, maxObject := f.resp, f.maxObject(f.p)
	if f.req.Slice == nil {
		httpcache.AddImplicitVary(f.r, resp.Header, f.p.VaryBy, f.p.RegistryAware)
	}
	var why string
	if ref := f.req.Registry; ref != nil {
		// A mirror's: by its kind (registry.Ref.Lifetime), a 200 only.
		lifetime = ref.Lifetime(f.p)
		if resp.StatusCode != http.StatusOK || maxObject <= 0 {
			why = httpcache.ReasonStatus
		}
	} else {
		lifetime, why = storeLifetime(f.p, f.r, f.judged(), resp.Header, f.received, maxObject)
	}
	if why == "" && resp.ContentLength > maxObject {
		why = httpcache.ReasonTooLarge
	}
	if why == "" && f.req.Slice != nil && !slice.Storable(resp.Header) {
		why = httpcache.ReasonSliceNoID
	}
	switch {
	case why != "":
		f.reason = why
		return "", 0, noop, false
	case f.req.Slice != nil:
		return f.key, lifetime, noop, true
	}
	if fields := httpcache.VaryFields(resp.Header); len(fields) > 0 {
		key, done, ok = f.variant(fields)
		return key, lifetime, done, ok
	}
	return f.key, lifetime, noop, true
}

// stream hands wr, the response streaming into the store, to a goroutine
// of its own that writes it; the requests collapsed onto the fill follow
// it as readers, and so does this one, from rd (taken as wr was made, so
// that a small body refused by admission at once still reaches it).
func (f *fill) stream(wr *store.Writer, rd io.ReadCloser, done func(), status string) {
	call, fk := f.call, f.fk
	// A request from the end of the fill on looks at the store again.
	wr.OnFinish(func() {
		f.flights.Forget(fk, call)
		done() // stored (the store counts it now) or given up
	})
	e := wr.Entry()
	f.settle(&fillShare{wr: wr, req: f.r.Header})
	f.handed = true
	resp, fromOrigin, release, key := f.resp, f.fromOrigin, f.release, f.key
	f.cfg.Tasks.Go("fill", func() {
		defer release()
		nb, err := reply.Copy(wr, resp.Body)
		if fromOrigin {
			f.cfg.Metrics.OriginBytes.Add(float64(nb))
		}
		if err != nil {
			f.cfg.Logger.Warn("response body broke off; nothing stored", "key", f.keyShown(key), "after_bytes", nb, "err", errText(err))
			wr.Abort(err)
			return
		}
		if _, err := wr.Commit(); err != nil {
			f.cfg.Logger.Warn("storing response failed", "key", f.keyShown(key), "err", errText(err))
		}
	})
	f.out.Source = SourcePeer
	if fromOrigin {
		f.out.Source = SourceOrigin
	}
	f.then = leadAnswer{kind: answerStream, e: e, wr: wr, rd: rd, status: status}
}

// variant returns the key a varying response is stored under, and writes
// the URL's marker. It reports false when the URL has its policy's number
// of variants already, stored or being filled. A new variant's slot is
// held until done is called, once its fill has stored it or given up.
func (f *fill) variant(fields []string) (vk string, done func(), ok bool) {
	key := f.key
	vk = httpcache.VariantKey(key, fields, f.r.Header)
	limit := f.p.MaxVariants
	if limit <= 0 {
		limit = defaultMaxVariants
	}
	marker, found := f.cfg.Store.Get(key)
	if !found || marker.Status != varyMarker || !slices.Equal(httpcache.VaryFields(marker.Header), fields) {
		m := &store.Entry{Key: key, URL: purge.EntryURL(f.r), Status: varyMarker, Header: http.Header{"Vary": {strings.Join(fields, ", ")}},
			Received: f.received, Lifetime: 0}
		if err := f.cfg.Store.Put(m, nil); err != nil {
			f.reason = httpcache.ReasonStoreError
			return "", noop, false
		}
	}
	if _, found := f.cfg.Store.Get(vk); found {
		return vk, noop, true // a refresh of a variant already counted
	}
	stored := f.cfg.Store.Count(key)
	if _, ok := f.cfg.Store.Peek(PartKey(key)); ok {
		stored-- // a stored range (partial.go) is among the key's group, but is no variant
	}
	f.fillingMu.Lock()
	defer f.fillingMu.Unlock()
	if stored+f.filling[key] >= limit {
		f.reason = httpcache.ReasonVaryLimit
		return "", noop, false
	}
	f.filling[key]++
	return vk, func() {
		f.fillingMu.Lock()
		defer f.fillingMu.Unlock()
		if f.filling[key]--; f.filling[key] <= 0 {
			delete(f.filling, key)
		}
	}, true
}

func noop() {}

// settle keeps what the requests collapsed onto the fill share, once: a
// share that is no stream is for those waiting now, and later requests
// look at the store again (flight.Group.Lead).
func (f *fill) settle(sh *fillShare) {
	if !f.settled {
		f.settled, f.share = true, sh
	}
}

// refreshed is the stale response updated by a 304 (RFC 9111 3.2 and
// 4.3.4): the 304's header fields replace the stored ones, except those
// describing the body, and freshness is computed anew. answer is what this
// request is answered with; kept is what is stored again and shared with
// the requests waiting on this one, nil when nothing may be.
//
// The updated response is judged as a new one would be: a Set-Cookie the
// 304 brings (an origin renewing this client's session) goes to this
// client alone, never into what is stored; a 304 that makes the response
// unstorable (no-store, private, Vary: *) removes what was stored. When
// storing fails the refreshed entry still answers this request.
func (f *fill) refreshed() (answer, kept *store.Entry) {
	stale := f.stale
	h := stale.Header.Clone()
	for k, v := range f.resp.Header {
		switch k {
		case "Content-Length", "Content-Encoding", "Content-Range", "Transfer-Encoding", "Content-Type":
			continue
		}
		h[k] = v
	}
	stored, cookie := h, false
	lifetime, ok := StoreLifetime(f.p, f.r, stale.Status, h, f.received, 1<<62)
	if !ok && len(f.resp.Header["Set-Cookie"]) > 0 {
		stored, cookie = h.Clone(), true
		delete(stored, "Set-Cookie")
		lifetime, ok = StoreLifetime(f.p, f.r, stale.Status, stored, f.received, 1<<62)
	}
	if ref := f.req.Registry; ref != nil {
		lifetime = ref.Lifetime(f.p)
	}
	meta := &store.Entry{Key: stale.Key, URL: stale.URL, Status: stale.Status, Header: stored, Received: f.received,
		InitialAge: httpcache.InitialAge(h, f.requested, f.received), Lifetime: lifetime}
	with := func(e *store.Entry, h http.Header) *store.Entry {
		m := *e
		m.Header, m.Received, m.InitialAge, m.Lifetime = h, meta.Received, meta.InitialAge, meta.Lifetime
		return &m
	}
	if !ok {
		f.cfg.Store.Delete(stale.Key)
		return with(stale, h), nil
	}
	e, err := f.cfg.Store.Update(stale, meta)
	if err != nil {
		f.cfg.Logger.Warn("storing a revalidated response failed", "key", f.keyShown(stale.Key), "err", errText(err))
		e = with(stale, stored)
	}
	if cookie {
		return with(e, h), e // this client's Set-Cookie, on what is stored
	}
	return e, e
}

// maxObject is the largest object stored under the request's policy.
func (o *Owner) maxObject(p *policy.Policy) int64 {
	if p.MaxObject > 0 {
		return min(p.MaxObject, o.cfg.DiskBytes/2)
	}
	return o.cfg.MaxObjectBytes
}

// StoreLifetime decides by RFC 9111 3 and the policy whether a response
// with status and h, to request r, may be stored, and how long it stays
// fresh: the response's own freshness, else the policy's status or default
// TTL (as nginx's proxy_cache_valid applies only where the response states
// none). A response without freshness is stored only if it can be
// revalidated.
func StoreLifetime(p *policy.Policy, r *http.Request, status int, h http.Header, received time.Time, maxObject int64) (time.Duration, bool) {
	lifetime, why := storeLifetime(p, r, status, h, received, maxObject)
	return lifetime, why == ""
}

// storeLifetime is StoreLifetime, saying why a response is not stored (a
// Reason; "" when it is).
func storeLifetime(p *policy.Policy, r *http.Request, status int, h http.Header, received time.Time, maxObject int64) (time.Duration, string) {
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
	why := httpcache.Unstorable(status, h, authorized, httpcache.Overrides{
		TTL: policyTTL, StorePrivate: p.StorePrivate, StoreSetCookie: p.StoreSetCookie, Excluded: p.Excluded(status), Heuristic: p.Heuristic(status),
	}, p.Targeted...)
	switch {
	case why != "":
	case lifetime <= 0 && !validator:
		why = httpcache.ReasonNoLifetime
	case maxObject <= 0:
		why = httpcache.ReasonTooLarge
	}
	return lifetime, why
}
