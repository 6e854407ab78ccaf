package dataplane

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptrace"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"

	"github.com/shardcache/shardcache/dataplane/httpcache"
	"github.com/shardcache/shardcache/dataplane/origin"
	"github.com/shardcache/shardcache/dataplane/purge"
	"github.com/shardcache/shardcache/dataplane/relay"
	"github.com/shardcache/shardcache/dataplane/slice"
	"github.com/shardcache/shardcache/dataplane/store"
	pb "github.com/shardcache/shardcache/proto/shardcache/v1"
	"github.com/shardcache/shardcache/sdk/policy"
)

// serveClient is the client listener's handler: every request starts here.
func (n *Node) serveClient(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	// The hop headers mean something only on the peer listener; a client
	// sending them is ignored, never trusted.
	for _, f := range relay.InternalHeaders {
		r.Header.Del(f)
	}
	client := n.forwardedFor(r)
	rec := &recorder{ResponseWriter: w, status: http.StatusOK}
	route := "aborted"
	// Deferred, so that a response aborted mid-body is counted and logged.
	defer func() {
		if route != routePurge {
			n.requests.Add(1)
		}
		cache := rec.Header().Get("X-Cache")
		if cache == relay.CacheHit {
			n.hits.Add(1)
		}
		elapsed := time.Since(start)
		n.metrics.requests.WithLabelValues(route, cache, methodLabel(r.Method), statusClass(rec.status)).Inc()
		n.metrics.duration.WithLabelValues(route).Observe(elapsed.Seconds())
		n.metrics.responseSize.WithLabelValues(route).Observe(float64(rec.bytes))
		if c := n.metrics.routeBytes[route]; c != nil {
			c.Add(uint64(rec.bytes))
		}
		if rec.key != "" && cache != relay.CacheBypass && cache != "" {
			n.shadow.observe(rec.key, rec.bytes)
		}
		n.logAccess(r, rec, client, route, cache, start, elapsed)
		if n.tracer != nil {
			annotate(r.Context(), attribute.String("shardcache.node", n.cfg.ID), attribute.String("shardcache.route", route),
				attribute.String("shardcache.cache", cache))
		}
		rec.abortIfBroken()
	}()
	if len(r.TransferEncoding) > 0 && r.ProtoMajor == 1 {
		// The body was read by its Transfer-Encoding, any Content-Length
		// dropped (RFC 9112 6.1). A front proxy that read it by a
		// Content-Length would see other request boundaries: close the
		// connection after answering, so whatever follows on it is never
		// taken for a request.
		rec.Header().Set("Connection", "close")
	}
	if strings.Contains(r.URL.Path, "/.") {
		p, ok := removeDotSegments(r.URL.Path)
		if !ok {
			route = routeRejected
			http.Error(rec, "shardcache: the path climbs above the root", http.StatusBadRequest)
			return
		}
		r.URL.Path, r.URL.RawPath = p, ""
	}
	if r.Method == "PURGE" {
		route = routePurge
		n.servePurge(rec, r, client)
		return
	}
	route = n.route(rec, r)
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
	if p.Mode == pb.CacheMode_CACHE_MODE_BYPASS || bypassReason(r, p) != "" || p.Bypass(r) {
		n.bypass(w, r, p)
		return routeBypass
	}
	key := p.Key("http", r)
	if rec, ok := w.(*recorder); ok {
		rec.key = key
	}
	if p.SliceSize > 0 && n.serveSliced(w, r, key, p) {
		return routeSliced
	}
	rt := n.routes.Load()
	if rt == nil || p.Mode == pb.CacheMode_CACHE_MODE_LOCAL {
		n.serveOwned(w, r, key, p, nil, nil)
		return routeLocal
	}
	hot := n.isHot(key, p)
	replicas := 1
	if hot {
		n.hotKeys.note(key, r)
		replicas = p.ReplicationFactor
	}
	var buf [4]*pb.Member
	owners := rt.owners(buf[:0], key, replicas)
	if len(owners) == 0 {
		n.serveOwned(w, r, key, p, nil, nil)
		return routeLocal
	}
	for i, o := range owners {
		if o.GetId() == n.cfg.ID {
			var from *pb.Member
			if i > 0 {
				from = owners[0] // a replica fills from the first owner
			}
			n.serveOwned(w, r, key, p, from, nil)
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
	n.serveOwned(w, r, key, p, nil, nil)
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
	if !ok || !e.Fresh(time.Now()) || !n.usable(e) {
		return false
	}
	n.metrics.hot.WithLabelValues("copy_hit").Inc()
	n.answer(w, r, e, nil, relay.CacheHit)
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
	if n.draining.Load() {
		n.lastPeer.Store(time.Now().UnixNano())
	}
	if seen, err := strconv.ParseUint(r.Header.Get(relay.EpochHeader), 10, 64); err == nil && seen > n.Epoch() {
		// A peer serves a newer epoch: this node's push is late. Ask for
		// it; meanwhile the request is served here, never relayed again.
		n.session.RequestEpoch(seen)
	}
	if r.Header.Get(relay.HotKeysHeader) != "" {
		n.serveHotKeys(w, r)
		return
	}
	key, p, sl, err := n.peerKey(r)
	if err != nil {
		http.Error(w, "peer listener: "+err.Error(), http.StatusBadRequest)
		return
	}
	if r.Header.Get(relay.InvalidateHeader) != "" {
		n.dropLocal(key)
		w.WriteHeader(http.StatusNoContent)
		return
	}
	if n.tracer != nil {
		annotate(r.Context(), attribute.String("shardcache.node", n.cfg.ID))
	}
	rec := &recorder{ResponseWriter: w, status: http.StatusOK}
	w.Header().Set(relay.PurgeRevisionHeader, strconv.FormatInt(n.bans.Revision(), 10))
	n.serveOwned(rec, r, key, p, nil, sl)
	n.metrics.peerBytes.WithLabelValues("out").Add(float64(rec.bytes))
	if r.Header.Get(relay.HandoffHeader) != "" && rec.status < 300 && !rec.broken {
		n.handoffAnswers.Add(1)
	}
	rec.abortIfBroken()
}

// peerKey is the key and policy of a peer request: its URL's key under
// the scheme the client used, or the key of the slice it asks for.
func (n *Node) peerKey(r *http.Request) (string, *policy.Policy, *slice.Req, error) {
	scheme := r.Header.Get(relay.SchemeHeader)
	if scheme != "https" {
		scheme = "http"
	}
	p := n.policies.Load().Match(policy.Host(r), r.URL.Path)
	key := p.Key(scheme, r)
	sl, err := slice.ParseHeader(r.Header)
	if sl != nil {
		key = sl.Key(key)
	}
	return key, p, sl, err
}

// bypassReason says why r must not go through the cache, or "".
func bypassReason(r *http.Request, p *policy.Policy) string {
	switch {
	case r.Method != http.MethodGet && r.Method != http.MethodHead:
		return "method"
	case r.Header.Get("Authorization") != "" && !p.CacheAuthorized:
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
	h := r.Header.Clone() // the forwarded chain was extended on arrival
	relay.RemoveHopByHop(h)
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
	ctx, cancel := context.WithTimeout(r.Context(), n.relayTimeout(p))
	defer cancel()
	ctx = httptrace.WithClientTrace(ctx, origin.PassInterim(w))
	sent := time.Now()
	resp, err := n.peers.Forward(ctx, owner.GetPeerAddress(), r, n.relayHeader(r))
	n.metrics.peerDuration.Observe(time.Since(sent).Seconds())
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
	// An owner behind this node's purges may answer with what this node
	// purged: pass it on (the purge is not complete yet), keep no copy.
	behind := n.peerBehind(resp.Header)
	if hot && !behind && r.Method == http.MethodGet && n.admitHotCopy(w, r, key, p, resp) {
		return true
	}
	var body io.Reader = resp.Body
	if resp.ContentLength >= 0 && resp.ContentLength <= relayBuffered {
		// A small answer is read whole before anything is written: an
		// owner that dies mid-answer is then routed around like one that
		// never answered, and the client sees no broken response.
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			n.metrics.peerReqs.WithLabelValues(owner.GetId(), "error").Inc()
			n.log.Warn("relay broke off; serving locally", "owner", owner.GetId(), "err", err)
			return false
		}
		body = bytes.NewReader(b)
	}
	copyHeader(w.Header(), resp.Header)
	w.WriteHeader(resp.StatusCode)
	nb, broken := pass(w, body)
	n.countPeerIn(nb)
	if broken {
		n.metrics.peerReqs.WithLabelValues(owner.GetId(), "broken").Inc()
	}
	return true
}

// relayTimeout bounds one relayed request under p.
func (n *Node) relayTimeout(p *policy.Policy) time.Duration {
	if p.RelayTimeout > 0 {
		return p.RelayTimeout
	}
	return n.cfg.RelayTimeout
}

// relayBuffered is the largest relayed answer read whole before it is
// passed on.
const relayBuffered = 64 << 10

// countPeerIn records body bytes received over the peer hop.
func (n *Node) countPeerIn(nb int64) {
	n.peerBytes.Add(uint64(nb))
	n.metrics.peerBytes.WithLabelValues("in").Add(float64(nb))
}

// admitHotCopy answers w from a relayed response and keeps a copy, when the
// response is small and may be stored. It reports false, having read and
// written nothing, when it may not.
func (n *Node) admitHotCopy(w http.ResponseWriter, r *http.Request, key string, p *policy.Policy, resp *http.Response) bool {
	received := time.Now()
	lifetime, ok := n.storeLifetime(p, r, resp.StatusCode, resp.Header, received, n.cfg.HotCopyMaxObject)
	// A copy is kept only of an answer that is the same for every client:
	// one negotiated by content coding (Vary) is not.
	if !ok || resp.ContentLength < 0 || resp.ContentLength > n.cfg.HotCopyMaxObject || resp.Header.Get("Vary") != "" || resp.Header.Get("Content-Encoding") != "" {
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
	e := &store.Entry{Key: key, URL: purge.EntryURL(r), Status: resp.StatusCode, Header: resp.Header, Body: body, Received: received,
		InitialAge: httpcache.InitialAge(resp.Header, received, received), Lifetime: lifetime, Size: int64(len(body)), Length: int64(len(body))}
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

// bypass forwards a request that must not be cached straight to the origin.
//
// An unsafe method that succeeds invalidates what the cluster stores for
// its target (RFC 9111 4.4).
func (n *Node) bypass(w http.ResponseWriter, r *http.Request, p *policy.Policy) {
	ctx, cancel := context.WithTimeout(r.Context(), n.originTimeout(p))
	defer cancel()
	resp, err := n.origin.Fetch(httptrace.WithClientTrace(ctx, origin.PassInterim(w)), r, p.Origins, false, nil)
	if err != nil {
		n.metrics.originReqs.WithLabelValues("bypass", "error").Inc()
		http.Error(w, "shardcache: origin unreachable", http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	n.metrics.originReqs.WithLabelValues("bypass", statusClass(resp.StatusCode)).Inc()
	relay.RemoveHopByHop(resp.Header)
	copyHeader(w.Header(), resp.Header)
	w.Header().Set("X-Cache", relay.CacheBypass)
	if unsafeMethod(r.Method) && resp.StatusCode < 400 {
		n.invalidate(r, resp.Header)
	}
	w.WriteHeader(resp.StatusCode)
	pass(w, resp.Body)
}

func copyHeader(dst, src http.Header) {
	for k, v := range src {
		dst[k] = v
	}
}

// methodLabel keeps the method label's values few: the standard methods
// and PURGE, "other" for the rest.
func methodLabel(m string) string {
	switch m {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodDelete, http.MethodPatch,
		http.MethodOptions, "PURGE":
		return m
	}
	return "other"
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
	key    string // the cache key, once known
	// broken is set by breakOff: the body broke off after the header was
	// sent; nothing more is written, and the handler aborts the transfer.
	broken bool
}

func (r *recorder) breakOff() { r.broken = true }

// abortIfBroken ends a handler whose answer broke off: net/http then
// aborts the connection (or resets the HTTP/2 stream), so the client sees
// a broken transfer.
func (r *recorder) abortIfBroken() {
	if r.broken {
		panic(http.ErrAbortHandler)
	}
}

func (r *recorder) WriteHeader(code int) {
	if r.broken {
		return
	}
	if !r.wrote {
		r.status, r.wrote = code, true
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *recorder) Write(b []byte) (int, error) {
	if r.broken {
		return 0, errBrokenOff
	}
	r.wrote = true
	n, err := r.ResponseWriter.Write(b)
	r.bytes += int64(n)
	return n, err
}

// ReadFrom passes the real writer's ReadFrom on, so that a body read from
// a file goes out by sendfile.
func (r *recorder) ReadFrom(src io.Reader) (int64, error) {
	if r.broken {
		return 0, errBrokenOff
	}
	r.wrote = true
	n, err := io.Copy(r.ResponseWriter, src)
	r.bytes += n
	return n, err
}

// Unwrap lets http.ResponseController reach the real writer.
func (r *recorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }
