package dataplane

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/klauspost/compress/zstd"

	"github.com/shardcache/shardcache/dataplane/flight"
	"github.com/shardcache/shardcache/dataplane/freshness"
	"github.com/shardcache/shardcache/dataplane/policy"
	"github.com/shardcache/shardcache/dataplane/relay"
	"github.com/shardcache/shardcache/dataplane/store"
	pb "github.com/shardcache/shardcache/proto/shardcache/v1"
)

// X-Cache values.
const (
	cacheHit    = "HIT"
	cacheMiss   = "MISS"
	cacheBypass = "BYPASS"
)

// serveClient is the client listener's handler: every request starts here.
func (n *Node) serveClient(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	// The hop headers mean something only on the peer listener; a client
	// sending them is ignored, never trusted.
	r.Header.Del(relay.HopHeader)
	r.Header.Del(relay.EpochHeader)
	r.Header.Del(relay.SchemeHeader)
	rec := &recorder{ResponseWriter: w, status: http.StatusOK}
	route := n.route(rec, r)
	n.requests.Add(1)
	cache := rec.Header().Get("X-Cache")
	if cache == cacheHit {
		n.hits.Add(1)
	}
	n.metrics.requests.WithLabelValues(route, cache, statusClass(rec.status)).Inc()
	n.metrics.duration.WithLabelValues(route).Observe(time.Since(start).Seconds())
	n.metrics.responseSize.WithLabelValues(route).Observe(float64(rec.bytes))
}

// route serves r by bypass, redirect, relay or from this node's store, as
// its policy says, and returns the route taken.
//
// A hot key has the first replication-factor ring members as owners: each
// serves it from its own store, a later owner filling from the first rather
// than the origin. A node that owns a hot key not at all relays it once and
// keeps a local copy for as long as the object stays fresh.
func (n *Node) route(w http.ResponseWriter, r *http.Request) string {
	p := n.policies.Load().Match(policy.Host(r), r.URL.Path)
	if p.Mode == pb.CacheMode_CACHE_MODE_BYPASS || bypassReason(r) != "" || p.Bypass(r) {
		n.bypass(w, r, p)
		return routeBypass
	}
	key := p.Key("http", r)
	rt := n.routes.Load()
	if rt == nil || p.Mode == pb.CacheMode_CACHE_MODE_LOCAL {
		n.serveOwned(w, r, key, p, nil)
		return routeLocal
	}
	hot := n.isHot(key, p)
	replicas := 1
	if hot {
		replicas = p.ReplicationFactor
	}
	var buf [4]*pb.Member
	owners := rt.owners(buf[:0], key, replicas)
	if len(owners) == 0 {
		n.serveOwned(w, r, key, p, nil)
		return routeLocal
	}
	for i, o := range owners {
		if o.GetId() == n.cfg.ID {
			var from *pb.Member
			if i > 0 {
				from = owners[0] // a replica fills from the first owner
			}
			n.serveOwned(w, r, key, p, from)
			return routeLocal
		}
	}
	if hot && n.serveHotCopy(w, r, key) {
		return routeLocal
	}
	owner := owners[0]
	if p.Mode == pb.CacheMode_CACHE_MODE_REDIRECT && owner.GetPublicUrl() != "" {
		redirect(w, r, owner)
		return routeRedirect
	}
	if n.relay(w, r, owner, key, p, hot) {
		n.relayed.Add(1)
		return routeRelayed
	}
	// The owner did not answer. The next ring member owns the key once the
	// owner leaves the ring, so it is the one to fill; if it is this node,
	// or it fails too, serve from here: an origin request, but the client
	// is served until the next epoch.
	n.metrics.relayFallback.Inc()
	if next := rt.owners(buf[:0], key, len(owners)+1); len(next) > len(owners) {
		if alt := next[len(owners)]; alt.GetId() != n.cfg.ID && n.relay(w, r, alt, key, p, hot) {
			n.relayed.Add(1)
			return routeRelayed
		}
	}
	n.serveOwned(w, r, key, p, nil)
	return routeLocal
}

// isHot counts a request for key and says whether its rate at this node is
// above the policy's (or the node's) threshold.
func (n *Node) isHot(key string, p *policy.Policy) bool {
	if n.hot == nil {
		return false
	}
	threshold := n.cfg.HotThreshold
	if p.HotThreshold > 0 {
		threshold = p.HotThreshold
	}
	if n.hot.ObserveRate(key) < float64(threshold) {
		return false
	}
	n.metrics.hot.WithLabelValues("hot_request").Inc()
	return true
}

// serveHotCopy answers from a local copy of a hot object, if fresh.
func (n *Node) serveHotCopy(w http.ResponseWriter, r *http.Request, key string) bool {
	e, ok := n.hotCopies.Get(key)
	if !ok || !e.Fresh(time.Now()) {
		return false
	}
	n.metrics.hot.WithLabelValues("copy_hit").Inc()
	n.answer(w, r, e, nil, cacheHit)
	return true
}

// redirect answers 307 with the owner's public URL, so the body crosses the
// network once. The owner serves the redirected request as its own.
func redirect(w http.ResponseWriter, r *http.Request, owner *pb.Member) {
	w.Header().Set("Location", strings.TrimSuffix(owner.GetPublicUrl(), "/")+r.URL.RequestURI())
	w.Header().Set("X-Cache-Node", owner.GetId())
	w.WriteHeader(http.StatusTemporaryRedirect)
}

// servePeer is the peer listener's handler: requests relayed by other nodes,
// served from this node's store and never relayed again.
func (n *Node) servePeer(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get(relay.HopHeader) == "" {
		http.Error(w, "peer listener: only requests relayed by shardcache nodes are served here", http.StatusBadRequest)
		return
	}
	scheme := r.Header.Get(relay.SchemeHeader)
	if scheme != "https" {
		scheme = "http"
	}
	p := n.policies.Load().Match(policy.Host(r), r.URL.Path)
	rec := &recorder{ResponseWriter: w, status: http.StatusOK}
	n.serveOwned(rec, r, p.Key(scheme, r), p, nil)
	n.metrics.peerBytes.WithLabelValues("out").Add(float64(rec.bytes))
}

// bypassReason says why r must not go through the cache, or "".
func bypassReason(r *http.Request) string {
	switch {
	case r.Method != http.MethodGet && r.Method != http.MethodHead:
		return "method"
	case r.Header.Get("Authorization") != "":
		return "authorization"
	case r.Header.Get("Upgrade") != "":
		return "upgrade"
	}
	for _, v := range r.Header.Values("Cache-Control") {
		if strings.Contains(strings.ToLower(v), "no-store") {
			return "no-store"
		}
	}
	return ""
}

// relayHeader is the header of a request relayed to a peer: the client's
// end-to-end fields, the forwarded-for chain, and the hop marker.
func (n *Node) relayHeader(r *http.Request) http.Header {
	h := r.Header.Clone()
	relay.RemoveHopByHop(h)
	appendForwardedFor(h, r.RemoteAddr)
	h.Set(relay.HopHeader, n.cfg.ID)
	if rt := n.routes.Load(); rt != nil {
		h.Set(relay.EpochHeader, strconv.FormatUint(rt.epoch.GetEpoch(), 10))
	}
	h.Set(relay.SchemeHeader, "http")
	return h
}

// relay forwards r to owner and copies the answer; for a hot key it keeps a
// local copy of a small, storable answer. It reports false when the owner
// could not be reached and nothing was written.
func (n *Node) relay(w http.ResponseWriter, r *http.Request, owner *pb.Member, key string, p *policy.Policy, hot bool) bool {
	ctx, cancel := context.WithTimeout(r.Context(), n.cfg.RelayTimeout)
	defer cancel()
	resp, err := n.peers.Forward(ctx, owner.GetPeerAddress(), r, n.relayHeader(r))
	if errors.Is(err, relay.ErrPeerDown) {
		n.metrics.peerReqs.WithLabelValues(owner.GetId(), "skipped").Inc()
		return false
	}
	if err != nil {
		n.metrics.peerReqs.WithLabelValues(owner.GetId(), "error").Inc()
		if r.Context().Err() == nil {
			n.log.Warn("relay failed; serving locally", "owner", owner.GetId(), "err", err)
		}
		return false
	}
	defer resp.Body.Close()
	n.metrics.peerReqs.WithLabelValues(owner.GetId(), statusClass(resp.StatusCode)).Inc()
	relay.RemoveHopByHop(resp.Header)
	if hot && r.Method == http.MethodGet && n.admitHotCopy(w, key, p, resp) {
		return true
	}
	copyHeader(w.Header(), resp.Header)
	w.WriteHeader(resp.StatusCode)
	nb, _ := io.Copy(w, resp.Body)
	n.countPeerIn(nb)
	return true
}

// countPeerIn records body bytes received over the peer hop.
func (n *Node) countPeerIn(nb int64) {
	n.peerBytes.Add(uint64(nb))
	n.metrics.peerBytes.WithLabelValues("in").Add(float64(nb))
}

// admitHotCopy answers w from a relayed response and keeps a copy, when the
// response is small and may be stored. It reports false, having read and
// written nothing, when it may not.
func (n *Node) admitHotCopy(w http.ResponseWriter, key string, p *policy.Policy, resp *http.Response) bool {
	received := time.Now()
	lifetime, ok := n.storeLifetime(p, resp, received, n.cfg.HotCopyMaxObject)
	// A copy is kept only of an answer that is the same for every client:
	// one negotiated by content coding (Vary) is not.
	if !ok || resp.ContentLength < 0 || resp.Header.Get("Vary") != "" || resp.Header.Get("Content-Encoding") != "" {
		return false
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, resp.ContentLength))
	if err != nil || int64(len(body)) != resp.ContentLength {
		// The owner's answer broke off: pass on what came, as a plain relay would.
		copyHeader(w.Header(), resp.Header)
		w.WriteHeader(resp.StatusCode)
		w.Write(body)
		return true
	}
	n.countPeerIn(int64(len(body)))
	e := &store.Entry{Key: key, Status: resp.StatusCode, Header: resp.Header, Body: body, Received: received,
		InitialAge: freshness.InitialAge(resp.Header, received), Lifetime: lifetime, Size: int64(len(body)), Length: int64(len(body))}
	if n.hotCopies.Set(e) {
		n.metrics.hot.WithLabelValues("copy_admitted").Inc()
	}
	// Answer as the owner did (its X-Cache and X-Cache-Node), not as a copy.
	copyHeader(w.Header(), resp.Header)
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(resp.StatusCode)
	w.Write(body)
	return true
}

// storeLifetime decides whether resp may be stored under p, objects up to
// maxObject bytes, and for how long: the response's own freshness, else the
// policy's status or default TTL (as nginx's proxy_cache_valid applies only
// where the response states none).
func (n *Node) storeLifetime(p *policy.Policy, resp *http.Response, received time.Time, maxObject int64) (time.Duration, bool) {
	lifetime := freshness.Lifetime(resp.StatusCode, resp.Header, received)
	if !freshness.Explicit(resp.Header) {
		if ttl, ok := p.StatusTTL(resp.StatusCode); ok {
			lifetime = ttl
		} else if p.DefaultTTL > 0 {
			lifetime = p.DefaultTTL
		}
	}
	ok := lifetime > 0 && !freshness.Forbidden(resp.Header) && !p.Excluded(resp.StatusCode) && resp.ContentLength <= maxObject
	return lifetime, ok
}

// serveOwned serves key from this node's store, or fetches it from the
// origin, collapsing concurrent misses into one origin request.
//
// from, when set, is the key's first owner: this node is a later owner of a
// hot key and fills from it before going to the origin, so the origin still
// sees one request.
func (n *Node) serveOwned(w http.ResponseWriter, r *http.Request, key string, p *policy.Policy, from *pb.Member) {
	if e, ok := n.store.Get(key); ok && e.Fresh(time.Now()) {
		if n.answer(w, r, e, nil, cacheHit) == nil {
			return
		}
		// The record could not be read (and was discarded): fill anew.
	}
	call, leader := n.flights.Join(key)
	if leader {
		n.fill(w, r, key, p, from, call)
		return
	}
	wctx, cancel := context.WithTimeout(r.Context(), n.cfg.OriginTimeout)
	n.waiting.Add(1)
	fw, ok := call.Wait(wctx)
	n.waiting.Add(-1)
	cancel()
	if ok {
		// Follow the leader's fill as it streams in.
		rd, err := fw.NewReader()
		if err == nil {
			defer rd.Close()
			n.metrics.collapsed.Inc()
			err = n.answer(w, r, fw.Entry(), rd, cacheHit)
		}
		if err == nil {
			return
		}
		if !errors.Is(err, store.ErrNotStored) {
			// The fill failed: its failure is shared, not retried.
			http.Error(w, "shardcache: origin response broke off", http.StatusBadGateway)
			return
		}
	}
	// The leader's response could not be shared (not cacheable, too large)
	// or took too long: fetch alone, as nginx's proxy_cache_lock does.
	n.fill(w, r, key, p, from, nil)
}

// fill fetches key from the origin and answers w. A storable response is
// written to the store by a goroutine of its own, which this request and
// every request collapsed onto it (call, when not nil) follow as readers:
// a client that hangs up or reads slowly delays no one else.
func (n *Node) fill(w http.ResponseWriter, r *http.Request, key string, p *policy.Policy, from *pb.Member, call *flight.Call[*store.Writer]) {
	leader := call
	settle := func(wr *store.Writer, ok bool) {
		if call != nil {
			n.flights.Settle(key, call, wr, ok)
			call = nil
		}
	}
	defer settle(nil, false)

	// The fill outlives a client that hangs up (others may be waiting on
	// it), but not the node.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), n.cfg.OriginTimeout)
	stop := context.AfterFunc(n.fillCtx, cancel)
	handed := false
	defer func() {
		if !handed {
			stop()
			cancel()
		}
	}()
	var resp *http.Response
	var err error
	if from != nil {
		resp = n.fillFromPeer(ctx, r, from)
	}
	fromOrigin := resp == nil
	if fromOrigin {
		resp, err = n.fetch(ctx, r, p, true)
	}
	if err != nil {
		n.metrics.originReqs.WithLabelValues("fill", "error").Inc()
		n.log.Warn("origin request failed", "key", key, "err", err)
		http.Error(w, "shardcache: origin unreachable", http.StatusBadGateway)
		return
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
	received := time.Now()
	relay.RemoveHopByHop(resp.Header)

	maxObject := n.cfg.MaxObjectBytes
	if p.MaxObject > 0 {
		maxObject = min(p.MaxObject, n.cfg.DiskBytes/2)
	}
	lifetime, storable := n.storeLifetime(p, resp, received, maxObject)
	if !storable {
		settle(nil, false)
		n.writeResponse(w, r, resp, fromOrigin)
		return
	}
	e := &store.Entry{
		Key:        key,
		Status:     resp.StatusCode,
		Header:     resp.Header,
		Received:   received,
		InitialAge: freshness.InitialAge(resp.Header, received),
		Lifetime:   lifetime,
	}
	wr, err := n.store.Create(e, resp.ContentLength, p.Compress && compressible(resp.Header, resp.ContentLength), maxObject)
	if err != nil {
		// The disk tier does not admit it (full, or failing): serve it unstored.
		settle(nil, false)
		n.writeResponse(w, r, resp, fromOrigin)
		return
	}
	settle(wr, true)
	handed = true
	n.fills.Add(1)
	go func() {
		defer n.fills.Done()
		defer cancel()
		defer stop()
		defer resp.Body.Close()
		nb, err := io.Copy(wr, resp.Body)
		if fromOrigin {
			n.metrics.originBytes.Add(float64(nb))
		}
		if err != nil {
			// Forgotten first: a request from now on starts a new fill.
			n.flights.Forget(key, leader)
			n.log.Warn("response body broke off; nothing stored", "key", key, "after_bytes", nb, "err", err)
			wr.Abort(err)
			return
		}
		if _, err := wr.Commit(); err != nil {
			n.log.Warn("storing response failed", "key", key, "err", err)
		}
		n.flights.Forget(key, leader) // after the commit: no gap without the object
	}()
	rd, err := wr.NewReader()
	if err == nil {
		defer rd.Close()
		err = n.answer(w, r, wr.Entry(), rd, cacheMiss)
	}
	if err != nil {
		http.Error(w, "shardcache: origin response broke off", http.StatusBadGateway)
	}
}

// fillFromPeer asks the first owner of a hot key for it; nil when the owner
// cannot answer (the caller then goes to the origin).
func (n *Node) fillFromPeer(ctx context.Context, r *http.Request, from *pb.Member) *http.Response {
	get := *r // Forward reads only the method, URL and host; the header is h
	get.Method = http.MethodGet
	h := n.relayHeader(r)
	for _, f := range []string{"If-None-Match", "If-Modified-Since", "If-Match", "If-Unmodified-Since", "If-Range", "Range", "Accept-Encoding"} {
		h.Del(f) // a fill brings the whole object, as the origin sent it
	}
	resp, err := n.peers.Forward(ctx, from.GetPeerAddress(), &get, h)
	if err != nil {
		n.metrics.peerReqs.WithLabelValues(from.GetId(), "error").Inc()
		return nil
	}
	n.metrics.peerReqs.WithLabelValues(from.GetId(), statusClass(resp.StatusCode)).Inc()
	if resp.StatusCode >= 500 {
		resp.Body.Close()
		return nil
	}
	n.metrics.hot.WithLabelValues("replica_fill").Inc()
	resp.Header.Del("X-Cache")
	resp.Header.Del("X-Cache-Node")
	resp.Header.Del("Age")
	return resp
}

// writeResponse streams a response that is not stored.
func (n *Node) writeResponse(w http.ResponseWriter, r *http.Request, resp *http.Response, fromOrigin bool) {
	copyHeader(w.Header(), resp.Header)
	w.Header().Set("X-Cache", cacheMiss)
	w.Header().Set("X-Cache-Node", n.cfg.ID)
	w.WriteHeader(resp.StatusCode)
	if r.Method != http.MethodHead {
		nb, _ := io.Copy(w, resp.Body)
		if fromOrigin {
			n.metrics.originBytes.Add(float64(nb))
		}
	}
}

// answer writes a stored entry to w, its body from memory, from its disk
// record (by sendfile where the platform has it), or from rd, a reader
// following the entry's fill as it streams in. The stored coding is sent
// to a client that accepts it and decoded for one that does not.
//
// It returns an error, having written nothing, when the body cannot be
// read at all. A fill that breaks off after the header was sent aborts the
// response, so the client sees a broken transfer rather than a short body.
func (n *Node) answer(w http.ResponseWriter, r *http.Request, e *store.Entry, rd io.Reader, status string) error {
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
	h := w.Header()
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
	if length >= 0 && bodyAllowed(e.Status) {
		h.Set("Content-Length", strconv.FormatInt(length, 10))
	}
	h.Set("Age", strconv.FormatInt(int64(e.Age(time.Now())/time.Second), 10))
	h.Set("X-Cache", status)
	h.Set("X-Cache-Node", n.cfg.ID)
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
			panic(http.ErrAbortHandler)
		}
		src = d
	}
	_, err := io.Copy(w, src)
	if err != nil && (follow != nil && follow.err != nil || decode && !isWriteError(err)) {
		panic(http.ErrAbortHandler) // the body broke off: do not end it cleanly
	}
	return nil
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

// bypass forwards a request that must not be cached straight to the origin.
func (n *Node) bypass(w http.ResponseWriter, r *http.Request, p *policy.Policy) {
	ctx, cancel := context.WithTimeout(r.Context(), n.cfg.OriginTimeout)
	defer cancel()
	resp, err := n.fetch(ctx, r, p, false)
	if err != nil {
		n.metrics.originReqs.WithLabelValues("bypass", "error").Inc()
		http.Error(w, "shardcache: origin unreachable", http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	n.metrics.originReqs.WithLabelValues("bypass", statusClass(resp.StatusCode)).Inc()
	relay.RemoveHopByHop(resp.Header)
	copyHeader(w.Header(), resp.Header)
	w.Header().Set("X-Cache", cacheBypass)
	w.WriteHeader(resp.StatusCode)
	io.Copy(w, resp.Body)
}

// fetch sends r to the policy's origins in order (the node's default
// origin when it names none) until one answers. A fill is a whole-object GET
// with no body; a bypass forwards the client's method and body, and is not
// retried on another origin once the body may have been read.
func (n *Node) fetch(ctx context.Context, r *http.Request, p *policy.Policy, fill bool) (*http.Response, error) {
	origins := p.Origins
	if len(origins) == 0 {
		origins = []*url.URL{n.originURL}
	}
	var err error
	for i, o := range origins {
		var req *http.Request
		if req, err = n.originRequest(ctx, r, o, fill); err != nil {
			return nil, err
		}
		if !fill {
			req.Body, req.ContentLength = r.Body, r.ContentLength
		}
		var resp *http.Response
		if resp, err = n.origin.Do(req); err == nil {
			return resp, nil
		}
		if !fill && r.ContentLength != 0 || i == len(origins)-1 {
			break
		}
		n.log.Warn("origin failed; trying the next", "origin", o.Host, "err", err)
	}
	return nil, err
}

// originRequest builds the request to origin for r: the origin's base URL
// with r's path and query, r's end-to-end headers, and the client's address
// appended to X-Forwarded-For. A fill is always a whole-object GET.
func (n *Node) originRequest(ctx context.Context, r *http.Request, origin *url.URL, fill bool) (*http.Request, error) {
	method := r.Method
	if fill {
		method = http.MethodGet // a HEAD miss fills with a GET, so the body is stored
	}
	u := *origin
	u.Path = strings.TrimSuffix(u.Path, "/") + r.URL.Path
	u.RawPath = ""
	if r.URL.RawPath != "" {
		u.RawPath = strings.TrimSuffix(origin.EscapedPath(), "/") + r.URL.RawPath
	}
	u.RawQuery = r.URL.RawQuery
	req, err := http.NewRequestWithContext(ctx, method, u.String(), nil)
	if err != nil {
		return nil, fmt.Errorf("shardcache: building origin request: %w", err)
	}
	req.Header = r.Header.Clone()
	relay.RemoveHopByHop(req.Header)
	for _, h := range []string{relay.HopHeader, relay.EpochHeader, relay.SchemeHeader} {
		req.Header.Del(h)
	}
	if fill {
		// A fill brings the whole object for every later client, not a 304
		// or a range for this one.
		for _, h := range []string{"If-None-Match", "If-Modified-Since", "If-Match", "If-Unmodified-Since", "If-Range", "Range"} {
			req.Header.Del(h)
		}
	}
	appendForwardedFor(req.Header, r.RemoteAddr)
	via := "1.1 " + n.cfg.ID
	if prior := r.Header.Get("Via"); prior != "" {
		via = prior + ", " + via
	}
	req.Header.Set("Via", via)
	return req, nil
}

// appendForwardedFor extends X-Forwarded-For with the address the request
// came from, keeping the chain it already had (for audit).
func appendForwardedFor(h http.Header, remoteAddr string) {
	ip, _, err := net.SplitHostPort(remoteAddr)
	if err != nil {
		return
	}
	if prior := strings.Join(h.Values("X-Forwarded-For"), ", "); prior != "" {
		ip = prior + ", " + ip
	}
	h.Set("X-Forwarded-For", ip)
}

func copyHeader(dst, src http.Header) {
	for k, v := range src {
		dst[k] = v
	}
}

func statusClass(code int) string {
	if code < 100 || code > 599 {
		return "other"
	}
	return strconv.Itoa(code/100) + "xx"
}

// recorder notes the status and body bytes written, for metrics.
type recorder struct {
	http.ResponseWriter
	status int
	bytes  int64
	wrote  bool
}

func (r *recorder) WriteHeader(code int) {
	if !r.wrote {
		r.status, r.wrote = code, true
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *recorder) Write(b []byte) (int, error) {
	r.wrote = true
	n, err := r.ResponseWriter.Write(b)
	r.bytes += int64(n)
	return n, err
}

// ReadFrom passes the real writer's ReadFrom on, so that a body read from
// a file goes out by sendfile.
func (r *recorder) ReadFrom(src io.Reader) (int64, error) {
	r.wrote = true
	n, err := io.Copy(r.ResponseWriter, src)
	r.bytes += n
	return n, err
}

// Unwrap lets http.ResponseController reach the real writer.
func (r *recorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }
