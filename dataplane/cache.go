package dataplane

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/textproto"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/klauspost/compress/zstd"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/shardcache/shardcache/dataplane/flight"
	"github.com/shardcache/shardcache/dataplane/freshness"
	"github.com/shardcache/shardcache/dataplane/relay"
	"github.com/shardcache/shardcache/dataplane/store"
	pb "github.com/shardcache/shardcache/proto/shardcache/v1"
	"github.com/shardcache/shardcache/sdk/policy"
)

// flightKey is what concurrent fills of key collapse on: the key, and for
// a slice the version asked for, so that a request for one version never
// waits for another's.
func flightKey(key string, sl *sliceReq) string {
	if sl == nil || sl.version == "" {
		return key
	}
	return key + "\x00" + sl.version
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
func (n *Node) serveOwned(w http.ResponseWriter, r *http.Request, key string, p *policy.Policy, from *pb.Member, sl *sliceReq) {
	now := time.Now()
	req := freshness.ForRequest(r.Header)
	var span trace.Span
	if n.tracer != nil {
		_, span = n.tracer.Start(r.Context(), "cache.lookup", trace.WithAttributes(attribute.String("shardcache.key", key)))
	}
	stale := n.lookup(key, r)
	if sl != nil && stale != nil && sl.version != "" && objectVersion(stale.Header) != sl.version {
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
	if !sameVariant(varyFields(e.Header), s.req, r.Header) {
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
func (n *Node) decide(e *store.Entry, req freshness.Directives, p *policy.Policy, now time.Time) use {
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
	resp := freshness.ParseCacheControl(e.Header)
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
	resp := freshness.ParseCacheControl(e.Header)
	if resp.MustRevalidate() {
		return false
	}
	window := p.StaleIfError
	if d, ok := resp.Seconds("stale-if-error"); ok {
		window = max(window, d)
	}
	if d, ok := freshness.ForRequest(r.Header).Seconds("stale-if-error"); ok {
		window = max(window, d)
	}
	return e.Age(now)-e.Lifetime <= window
}

// revalidateInBackground refreshes a stale entry with one request of its
// own, unless a fill of the key is already running.
func (n *Node) revalidateInBackground(key string, r *http.Request, p *policy.Policy, stale *store.Entry, sl *sliceReq) {
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

// breakOff ends a response whose header is sent so that whoever reads it
// sees a broken transfer, never a short body taken for whole: a client's
// connection is aborted (by the handler's panic that net/http recovers, and
// inProcess for a slice); work no client waits on (discard) is told by the
// error alone, which its caller returns.
func breakOff(w http.ResponseWriter) error {
	if _, ok := w.(discard); !ok {
		panic(http.ErrAbortHandler)
	}
	return errBrokenOff
}

func (d discard) Header() http.Header         { return d.h }
func (d discard) Write(b []byte) (int, error) { return len(b), nil }
func (d discard) WriteHeader(int)             {}

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
func (n *Node) fill(w http.ResponseWriter, r *http.Request, key string, p *policy.Policy, from *pb.Member, call *flight.Call[*fillShare], stale *store.Entry, sl *sliceReq) {
	leader := call
	fk := flightKey(key, sl)
	settle := func(s *fillShare) {
		if call != nil {
			n.flights.Settle(fk, call, s, s != nil)
			if s != nil && s.wr == nil {
				// An answer that is not a stream is for those waiting now;
				// later requests look at the store again.
				n.flights.Forget(fk, call)
			}
			call = nil
		}
	}
	defer settle(nil)

	// The fill outlives a client that hangs up (others may be waiting on
	// it), but not the node.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), n.originTimeout(p))
	stop := context.AfterFunc(n.fillCtx, cancel)
	handed := false
	defer func() {
		if !handed {
			stop()
			cancel()
		}
	}()
	ctx = httptrace.WithClientTrace(ctx, passInterim(w))
	// Purges wait for fills that began before them; see sweepBans.
	endFill := n.inflight.begin()
	defer func() {
		if !handed {
			endFill()
		}
	}()
	var resp *http.Response
	var err error
	if stale == nil {
		if from != nil {
			resp = n.fillFromPeer(ctx, r, from, false)
		} else if prev := n.handoffFrom(key, r); prev != nil {
			resp = n.fillFromPeer(ctx, r, prev, true)
		}
	}
	if resp == nil && r.Header.Get(relay.PrecopyHeader) != "" {
		return // a pre-copy takes what a peer has, never the origin
	}
	fromOrigin := resp == nil
	requested := time.Now()
	if fromOrigin {
		extra := validators(stale)
		if sl != nil {
			extra = sl.originHeader()
		}
		resp, err = n.fetch(ctx, r, p, true, extra)
	}
	now := time.Now()
	if err != nil || resp.StatusCode >= 500 && stale != nil {
		result := "error"
		if err == nil {
			result = statusClass(resp.StatusCode)
		}
		n.metrics.originReqs.WithLabelValues("fill", result).Inc()
		if stale != nil && n.staleOnError(stale, r, p, now) {
			if resp != nil {
				resp.Body.Close()
			}
			settle(&fillShare{e: stale, status: relay.CacheStale})
			n.answer(w, r, stale, nil, relay.CacheStale)
			return
		}
		if err != nil {
			n.log.Warn("origin request failed", "key", key, "err", err)
			code := http.StatusBadGateway
			if stale != nil {
				code = http.StatusGatewayTimeout // a stored response it may not serve
			}
			settle(&fillShare{err: errors.New("origin unreachable"), code: code})
			http.Error(w, "shardcache: origin unreachable", code)
			return
		}
	}
	defer func() {
		if !handed {
			resp.Body.Close()
		}
	}()
	if fromOrigin {
		n.originFills.Add(1)
		n.metrics.originReqs.WithLabelValues("fill", statusClass(resp.StatusCode)).Inc()
	}
	relay.RemoveHopByHop(resp.Header)
	if sl != nil {
		if err := sl.fromOrigin(resp); err != nil {
			code := http.StatusBadGateway
			if errors.Is(err, errSliceChanged) {
				code = http.StatusPreconditionFailed
			} else {
				n.log.Warn("origin answer cannot be sliced", "key", key, "err", err)
			}
			settle(&fillShare{err: err, code: code})
			http.Error(w, "shardcache: "+err.Error(), code)
			return
		}
	}

	if resp.StatusCode == http.StatusNotModified && stale != nil {
		e := n.refreshed(stale, resp, p, r, requested, now)
		settle(&fillShare{e: e, status: relay.CacheRevalidated})
		n.answer(w, r, e, nil, relay.CacheRevalidated)
		return
	}
	status := relay.CacheMiss
	if stale != nil {
		status = relay.CacheExpired
	}
	maxObject := n.cfg.MaxObjectBytes
	if p.MaxObject > 0 {
		maxObject = min(p.MaxObject, n.cfg.DiskBytes/2)
	}
	judged := resp.StatusCode
	if sl != nil && judged == http.StatusPartialContent {
		judged = http.StatusOK // a slice is stored as the object would be
	}
	lifetime, storable := n.storeLifetime(p, r, judged, resp.Header, now, maxObject)
	storable = storable && resp.ContentLength <= maxObject
	storeKey := key
	if sl != nil {
		storable = storable && sliceVary(resp.Header)
	} else if fields := varyFields(resp.Header); storable && len(fields) > 0 {
		storeKey, storable = n.variant(key, fields, r, p, now)
	}
	if !storable {
		settle(nil)
		n.writeResponse(w, r, resp, fromOrigin, status)
		return
	}
	e := &store.Entry{
		Key:        storeKey,
		URL:        entryURL(r),
		Status:     resp.StatusCode,
		Header:     resp.Header,
		Received:   now,
		InitialAge: freshness.InitialAge(resp.Header, requested, now),
		Lifetime:   lifetime,
	}
	compress := p.Compress && sl == nil && compressible(resp.Header, resp.ContentLength)
	wr, err := n.store.Create(e, resp.ContentLength, compress, maxObject)
	if err != nil {
		// The disk tier does not admit it (full, or failing): serve it unstored.
		settle(nil)
		n.writeResponse(w, r, resp, fromOrigin, status)
		return
	}
	// A request from the end of the fill on looks at the store again.
	wr.OnFinish(func() { n.flights.Forget(fk, leader) })
	settle(&fillShare{wr: wr, req: r.Header})
	handed = true
	n.fills.Go(func() {
		defer endFill()
		defer cancel()
		defer stop()
		defer resp.Body.Close()
		nb, err := io.Copy(wr, resp.Body)
		if fromOrigin {
			n.metrics.originBytes.Add(float64(nb))
		}
		if err != nil {
			n.log.Warn("response body broke off; nothing stored", "key", key, "after_bytes", nb, "err", err)
			wr.Abort(err)
			return
		}
		if _, err := wr.Commit(); err != nil {
			n.log.Warn("storing response failed", "key", key, "err", err)
		}
	})
	rd, err := wr.NewReader()
	if err == nil {
		defer rd.Close()
		err = n.answer(w, r, wr.Entry(), rd, status)
	}
	if err != nil {
		http.Error(w, "shardcache: origin response broke off", http.StatusBadGateway)
	}
}

// fillFromPeer asks another node for key; nil when it cannot answer (the
// caller then goes to the origin). A hot key's later owner asks the first
// owner, which fills from the origin if it must. A handoff asks the key's
// owner in the previous epoch for its stored copy only
// (only-if-cached): it never sends that node to the origin.
func (n *Node) fillFromPeer(ctx context.Context, r *http.Request, from *pb.Member, handoff bool) *http.Response {
	get := *r // Forward reads only the method, URL and host; the header is h
	get.Method = http.MethodGet
	h := n.relayHeader(r)
	for _, f := range conditionalFields {
		h.Del(f) // a fill brings the whole object, as the origin sent it
	}
	h.Del("Accept-Encoding")
	wait := n.cfg.RelayTimeout
	if handoff {
		h.Set(relay.HandoffHeader, "1")
		h.Set("Cache-Control", "only-if-cached")
		wait = handoffTimeout
	}
	resp, err := n.forward(ctx, from, &get, h, wait)
	if err != nil {
		if handoff {
			n.metrics.handoffs.WithLabelValues("error").Inc()
		}
		return nil
	}
	if n.peerBehind(resp.Header) || resp.StatusCode >= 500 {
		resp.Body.Close()
		if handoff {
			n.metrics.handoffs.WithLabelValues("miss").Inc()
		}
		return nil
	}
	if handoff {
		n.metrics.handoffs.WithLabelValues("hit").Inc()
	} else {
		n.metrics.hot.WithLabelValues("replica_fill").Inc()
		resp.Header.Del("Age")
	}
	resp.Header.Del("X-Cache")
	resp.Header.Del("X-Cache-Node")
	return resp
}

// handoffTimeout bounds the wait for a handoff's answer (see fillFromPeer).
const handoffTimeout = 2 * time.Second

// handoffFrom is the node to ask for key before the origin: its owner in
// the previous epoch, within the handoff window of a change; nil if none.
func (n *Node) handoffFrom(key string, r *http.Request) *pb.Member {
	if r.Header.Get(relay.HandoffHeader) != "" {
		return nil
	}
	return n.routes.Load().handoffFrom(key, n.cfg.ID, n.cfg.HandoffWindow, time.Now())
}

// forward sends a peer request to m. wait bounds the wait for the answer's
// header; its body is read at the caller's pace, within ctx.
func (n *Node) forward(ctx context.Context, m *pb.Member, r *http.Request, h http.Header, wait time.Duration) (*http.Response, error) {
	fctx, cancel := context.WithCancel(ctx)
	timer := time.AfterFunc(wait, cancel)
	resp, err := n.peers.Forward(fctx, m.GetPeerAddress(), r, h)
	timer.Stop()
	if err != nil {
		cancel()
		result := "error"
		if errors.Is(err, relay.ErrPeerDown) {
			result = "skipped"
		}
		n.metrics.peerReqs.WithLabelValues(m.GetId(), result).Inc()
		return nil, err
	}
	n.metrics.peerReqs.WithLabelValues(m.GetId(), statusClass(resp.StatusCode)).Inc()
	resp.Body = cancelOnClose{resp.Body, cancel}
	return resp, nil
}

// cancelOnClose ends a request's context when its body is closed.
type cancelOnClose struct {
	io.ReadCloser
	cancel context.CancelFunc
}

func (c cancelOnClose) Close() error {
	err := c.ReadCloser.Close()
	c.cancel()
	return err
}

// originTimeout bounds one origin request under p.
func (n *Node) originTimeout(p *policy.Policy) time.Duration {
	if p.OriginTimeout > 0 {
		return p.OriginTimeout
	}
	return n.cfg.OriginTimeout
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
func (n *Node) refreshed(stale *store.Entry, resp *http.Response, p *policy.Policy, r *http.Request, requested, now time.Time) *store.Entry {
	h := stale.Header.Clone()
	for k, v := range resp.Header {
		switch k {
		case "Content-Length", "Content-Encoding", "Content-Range", "Transfer-Encoding", "Content-Type":
			continue
		}
		h[k] = v
	}
	lifetime, _ := n.storeLifetime(p, r, stale.Status, h, now, 1<<62)
	meta := &store.Entry{Key: stale.Key, URL: stale.URL, Status: stale.Status, Header: h, Received: now,
		InitialAge: freshness.InitialAge(h, requested, now), Lifetime: lifetime}
	e, err := n.store.Update(stale, meta)
	if err != nil {
		n.log.Warn("storing a revalidated response failed", "key", stale.Key, "err", err)
		m := *stale
		m.Header, m.Received, m.InitialAge, m.Lifetime = meta.Header, meta.Received, meta.InitialAge, meta.Lifetime
		return &m
	}
	return e
}

// storeLifetime decides by RFC 9111 3 and the policy whether a response
// with status and h, to request r, may be stored, and how long it stays
// fresh: the response's own freshness, else the policy's status or default
// TTL (as nginx's proxy_cache_valid applies only where the response states
// none). A response without freshness is stored only if it can be
// revalidated.
func (n *Node) storeLifetime(p *policy.Policy, r *http.Request, status int, h http.Header, received time.Time, maxObject int64) (time.Duration, bool) {
	cc := freshness.ParseCacheControl(h)
	lifetime := freshness.Lifetime(status, h, received)
	policyTTL := false
	explicit := freshness.Explicit(h)
	if !explicit && !cc.Has("no-cache") {
		if ttl, ok := p.StatusTTL(status); ok {
			lifetime, policyTTL = ttl, true
		} else if p.DefaultTTL > 0 {
			lifetime, policyTTL = p.DefaultTTL, true
		}
	}
	// Worth storing only with a lifetime or a validator to serve it with.
	validator := h.Get("ETag") != "" || h.Get("Last-Modified") != ""
	ok := freshness.Storable(status, h, r.Header.Get("Authorization") != "", freshness.Overrides{
		TTL: policyTTL, StorePrivate: p.StorePrivate, StoreSetCookie: p.StoreSetCookie, Excluded: p.Excluded(status),
	}) && (lifetime > 0 || validator) && maxObject > 0
	return lifetime, ok
}

// writeResponse streams a response that is not stored.
func (n *Node) writeResponse(w http.ResponseWriter, r *http.Request, resp *http.Response, fromOrigin bool, status string) {
	copyHeader(w.Header(), resp.Header)
	w.Header().Set("X-Cache", status)
	w.Header().Set("X-Cache-Node", n.cfg.ID)
	w.WriteHeader(resp.StatusCode)
	if r.Method != http.MethodHead {
		nb, _ := io.Copy(w, resp.Body)
		if fromOrigin {
			n.metrics.originBytes.Add(float64(nb))
		}
	}
}

// passInterim passes 1xx interim responses from the origin (103 Early
// Hints, 100 Continue aside) on to the client.
func passInterim(w http.ResponseWriter) *httptrace.ClientTrace {
	return &httptrace.ClientTrace{Got1xxResponse: func(code int, h textproto.MIMEHeader) error {
		if code == http.StatusContinue || code == http.StatusSwitchingProtocols {
			return nil
		}
		hdr := w.Header()
		for k, v := range h {
			hdr[k] = v
		}
		w.WriteHeader(code)
		for k := range h {
			hdr.Del(k)
		}
		return nil
	}}
}

// answer writes a stored entry to w, its body from memory, from its disk
// record (by sendfile where the platform has it), or from rd, a reader
// following the entry's fill as it streams in. The stored coding is sent
// to a client that accepts it and decoded for one that does not. A client
// whose conditional matches gets 304 (RFC 9111 4.3.2).
//
// It returns an error, having written nothing, when the body cannot be
// read at all. A fill that breaks off after the header was sent aborts the
// response, so the client sees a broken transfer rather than a short body.
func (n *Node) answer(w http.ResponseWriter, r *http.Request, e *store.Entry, rd io.Reader, status string) error {
	h := w.Header()
	if notModified(r, e) {
		n.writeNotModified(w, e, status)
		return nil
	}
	switch ranges, err := rangesFor(r, e, rd != nil); {
	case ranges != nil || errors.Is(err, errRangeUnsatisfiable):
		body, done, err := n.readerAt(e)
		if err != nil {
			return err
		}
		defer done()
		for k, v := range e.Header {
			h[k] = v
		}
		h.Del("Content-Length")
		h.Set("Accept-Ranges", "bytes")
		n.cacheHeaders(h, e, status)
		section := func(start, length int64) io.Reader { return io.NewSectionReader(body, start, length) }
		if err := answerRanges(w, r, e, ranges, section); err != nil && !isWriteError(err) {
			return breakOff(w) // the stored body could not be read: do not end it cleanly
		}
		return nil
	}
	var src io.Reader
	var follow *errReader
	switch {
	case rd != nil:
		// Wait for the first bytes (or the end) before committing to a
		// status: a fill that fails at once is answered 502.
		first := make([]byte, 32<<10)
		k, err := io.ReadAtLeast(rd, first, 1)
		if err != nil && err != io.EOF {
			return err
		}
		follow = &errReader{r: io.MultiReader(bytes.NewReader(first[:k]), rd)}
		src = follow
	case e.InMemory():
		src = bytes.NewReader(e.Body)
	default:
		f, err := n.store.Open(e)
		if err != nil {
			return err
		}
		defer f.Close()
		src = &io.LimitedReader{R: f, N: e.Size} // what sendfile recognises
	}
	for k, v := range e.Header {
		h[k] = v // entries are immutable; the slices are only read
	}
	length, decode := e.Length, false
	if e.Coding != "" {
		addVary(h, "Accept-Encoding")
		weakenETag(h)
		if accepts(r, e.Coding) {
			h.Set("Content-Encoding", e.Coding)
			length = e.Size
		} else {
			decode = true
		}
	}
	h.Del("Content-Length")
	if rd == nil && e.Coding == "" && e.Status == http.StatusOK && e.Length >= 0 {
		h.Set("Accept-Ranges", "bytes")
	}
	if length >= 0 && bodyAllowed(e.Status) {
		h.Set("Content-Length", strconv.FormatInt(length, 10))
	}
	n.cacheHeaders(h, e, status)
	w.WriteHeader(e.Status)
	if r.Method == http.MethodHead || !bodyAllowed(e.Status) {
		return nil
	}
	if decode {
		d := decoders.Get().(*zstd.Decoder)
		defer func() {
			d.Reset(nil)
			decoders.Put(d)
		}()
		if err := d.Reset(src); err != nil {
			return breakOff(w)
		}
		src = d
	}
	_, err := io.Copy(w, src)
	if err != nil && (follow != nil && follow.err != nil || decode && !isWriteError(err)) {
		return breakOff(w) // the body broke off: do not end it cleanly
	}
	return nil
}

// writeNotModified answers 304 for e (RFC 9111 4.3.2): its header
// fields but those describing the body.
func (n *Node) writeNotModified(w http.ResponseWriter, e *store.Entry, status string) {
	h := w.Header()
	for k, v := range e.Header {
		h[k] = v
	}
	for _, k := range []string{"Content-Length", "Content-Type", "Content-Encoding", "Transfer-Encoding"} {
		h.Del(k)
	}
	if e.Coding != "" {
		addVary(h, "Accept-Encoding")
		weakenETag(h)
	}
	n.cacheHeaders(h, e, status)
	w.WriteHeader(http.StatusNotModified)
}

// cacheHeaders sets Age, X-Cache and X-Cache-Node.
func (n *Node) cacheHeaders(h http.Header, e *store.Entry, status string) {
	h.Set("Age", strconv.FormatInt(int64(e.Age(time.Now())/time.Second), 10))
	h.Set("X-Cache", status)
	h.Set("X-Cache-Node", n.cfg.ID)
}

// notModified evaluates a client's If-None-Match, else If-Modified-Since,
// against a stored 200 (RFC 9110 13.1.2, 13.1.3, 13.2.2).
func notModified(r *http.Request, e *store.Entry) bool {
	if e.Status != http.StatusOK || r.Method != http.MethodGet && r.Method != http.MethodHead {
		return false
	}
	if inm := r.Header.Values("If-None-Match"); len(inm) > 0 {
		etag := strings.TrimPrefix(e.Header.Get("Etag"), "W/")
		if etag == "" {
			return false
		}
		for _, v := range inm {
			for t := range strings.SplitSeq(v, ",") {
				t = strings.TrimSpace(t)
				if t == "*" || strings.TrimPrefix(t, "W/") == etag {
					return true // weak comparison
				}
			}
		}
		return false
	}
	ims, err := http.ParseTime(r.Header.Get("If-Modified-Since"))
	if err != nil {
		return false
	}
	lm, err := http.ParseTime(e.Header.Get("Last-Modified"))
	return err == nil && !lm.After(ims)
}

// errReader remembers its reader's error, to tell a broken source from a
// client that went away.
type errReader struct {
	r   io.Reader
	err error
}

func (e *errReader) Read(p []byte) (int, error) {
	n, err := e.r.Read(p)
	if err != nil && err != io.EOF {
		e.err = err
	}
	return n, err
}

// isWriteError reports whether err came from writing to the client.
func isWriteError(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) || errors.Is(err, http.ErrHandlerTimeout) || errors.Is(err, syscall.EPIPE) || errors.Is(err, syscall.ECONNRESET)
}

// bodyAllowed reports whether a response with status has a body.
func bodyAllowed(status int) bool {
	return status >= 200 && status != http.StatusNoContent && status != http.StatusNotModified
}

// Vary (RFC 9111 4.1). A response that varies is stored under a variant
// key: the URL's key, varySep, and the request's values of the fields it
// names. Under the URL's key itself a marker (status 0, never served)
// names those fields, so a lookup knows which variant to read.
const (
	varySep    = "\x1fvary\x1f"
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
		if fields := varyFields(e.Header); len(fields) > 0 {
			return nil // stored before it varied; cannot tell its variant
		}
		return e
	}
	v, ok := n.store.Get(variantKey(key, varyFields(e.Header), r.Header))
	if !ok || !n.usable(v) {
		return nil
	}
	return v
}

// variant returns the key a varying response to r is stored under, and
// writes the URL's marker. It reports false when the URL has its policy's
// number of variants already.
func (n *Node) variant(key string, fields []string, r *http.Request, p *policy.Policy, now time.Time) (string, bool) {
	vk := variantKey(key, fields, r.Header)
	limit := p.MaxVariants
	if limit <= 0 {
		limit = defaultMaxVariants
	}
	marker, ok := n.store.Get(key)
	if !ok || marker.Status != varyMarker || !slices.Equal(varyFields(marker.Header), fields) {
		m := &store.Entry{Key: key, URL: entryURL(r), Status: varyMarker, Header: http.Header{"Vary": {strings.Join(fields, ", ")}},
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

// varyFields are the lower-cased, sorted field names of h's Vary.
func varyFields(h http.Header) []string {
	var fields []string
	for _, v := range h.Values("Vary") {
		for f := range strings.SplitSeq(v, ",") {
			if f = strings.ToLower(strings.TrimSpace(f)); f != "" && !slices.Contains(fields, f) {
				fields = append(fields, f)
			}
		}
	}
	slices.Sort(fields)
	return fields
}

// variantKey is key extended with the request's normalised values of the
// fields (RFC 9111 4.1 allows normalising them).
func variantKey(key string, fields []string, h http.Header) string {
	var b strings.Builder
	b.WriteString(key)
	b.WriteString(varySep)
	for _, f := range fields {
		b.WriteString(f)
		b.WriteByte('=')
		b.WriteString(varyValue(f, h))
		b.WriteByte('\x1e')
	}
	return b.String()
}

// varyValue normalises the request's value of a Vary field: lines joined,
// spaces around commas dropped; Accept-Encoding reduced to the codings it
// accepts, sorted.
func varyValue(field string, h http.Header) string {
	vals := h.Values(textproto.CanonicalMIMEHeaderKey(field))
	if field == "accept-encoding" {
		r := &http.Request{Header: h}
		var acc []string
		for _, c := range []string{"br", "deflate", "gzip", "zstd"} {
			if accepts(r, c) {
				acc = append(acc, c)
			}
		}
		return strings.Join(acc, ",")
	}
	parts := make([]string, 0, len(vals))
	for _, v := range vals {
		for p := range strings.SplitSeq(v, ",") {
			parts = append(parts, strings.TrimSpace(p))
		}
	}
	return strings.Join(parts, ",")
}

// sameVariant reports whether two requests select the same variant.
func sameVariant(fields []string, a, b http.Header) bool {
	for _, f := range fields {
		if varyValue(f, a) != varyValue(f, b) {
			return false
		}
	}
	return true
}
