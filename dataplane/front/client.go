package front

import (
	"cmp"
	"context"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"

	"github.com/shardcache/shardcache/dataplane/hop"
	"github.com/shardcache/shardcache/dataplane/httpcache"
	"github.com/shardcache/shardcache/dataplane/internal/clientconn"
	"github.com/shardcache/shardcache/dataplane/internal/coalesce"
	"github.com/shardcache/shardcache/dataplane/internal/reply"
	"github.com/shardcache/shardcache/dataplane/internal/wait"
	"github.com/shardcache/shardcache/dataplane/logstream"
	"github.com/shardcache/shardcache/dataplane/metrics"
	pb "github.com/shardcache/shardcache/proto/shardcache/v1"
	"github.com/shardcache/shardcache/sdk/policy"
)

// serveClient is the client listener's handler: every request starts here.
func (f *Front) serveClient(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	// Decided once, before anything reads the request (arrive.go).
	p, refused := f.arrive(r)
	// The hop headers mean something only on the peer listener; a client
	// sending them is ignored, never trusted.
	client := f.forwardedFor(r)
	rec := reply.NewRecorder(w)
	route := metrics.RouteAborted
	// Deferred, so that a response aborted mid-body is counted and logged.
	defer func() {
		if route != metrics.RoutePurge {
			f.cfg.Metrics.Totals.Requests.Add(1)
		}
		cache := rec.Header().Get("X-Cache")
		if cache == httpcache.CacheHit {
			f.cfg.Metrics.Totals.Hits.Add(1)
		}
		elapsed := time.Since(start)
		f.cfg.Metrics.Requests.WithLabelValues(route, cache, methodLabel(r.Method), metrics.StatusClass(rec.Status)).Inc()
		exemplar := ""
		if f.cfg.Tracer != nil {
			exemplar = traceID(r.Context())
		}
		f.cfg.Metrics.ObserveRoute(route, elapsed, rec.Bytes, exemplar)
		if c := f.cfg.Metrics.RouteBytes[route]; c != nil {
			c.Add(uint64(rec.Bytes))
		}
		if rec.Key != "" && cache != httpcache.CacheBypass && cache != "" {
			ttl, storable := ownerJudged(rec.Header())
			f.cfg.Shadow.Observe(rec.Key, representationSize(r, rec), ttl, storable)
		}
		// One record for the access log and the log streams, built only
		// when one of them takes it.
		logged := f.cfg.AccessLog != nil && (rec.Status >= 500 || f.cfg.AccessLogSample >= 1 || rand.Float64() < f.cfg.AccessLogSample)
		if streamed := f.cfg.Logs.Active(); logged || streamed {
			lr := logstream.Record{Start: start, Client: client, ForwardedFor: r.Header.Get("X-Forwarded-For"),
				Method: r.Method, Host: r.Host, Path: loggedURI(r.URL), Proto: r.Proto, Status: rec.Status, Bytes: rec.Bytes,
				DurationMS: float64(elapsed.Microseconds()) / 1000, Cache: cache, Route: route, ServedBy: rec.Header().Get("X-Cache-Node"),
				Node: f.cfg.ID, TraceID: traceID(r.Context()), Referer: r.Referer(), UserAgent: r.UserAgent()}
			if logged {
				f.logAccess(&lr)
			}
			if streamed {
				shared := lr // the streams keep it; the log's copy stays on the stack
				f.cfg.Logs.Publish(&shared)
			}
		}
		if f.cfg.Tracer != nil {
			annotate(r.Context(), attribute.String("shardcache.node", f.cfg.ID), attribute.String("shardcache.route", route),
				attribute.String("shardcache.cache", cache))
		}
		if !rec.Broken {
			coalesce.Settle(rec, r) // a held answer's last bytes leave after it is counted
		} else if cc := clientconn.From(r.Context()); cc != nil && r.ProtoMajor == 1 {
			// A reset, not a close: an HTTP/1.0 client reading an answer
			// of no length to the close must not take it for whole.
			cc.Reset()
		}
		rec.AbortIfBroken()
	}()
	if cc := clientconn.From(r.Context()); cc != nil && cc.SawTransferEncoding() && r.ProtoMajor == 1 && r.ProtoMinor == 0 {
		// An HTTP/1.0 request naming Transfer-Encoding, which net/http
		// drops unread: its framing is faulty (RFC 9112 6.1). Answer it,
		// then close, so that what it sent as a body is never read as a
		// request.
		rec.Header().Set("Connection", "close")
	}
	if r.Body != nil && r.Body != http.NoBody && f.cfg.BodyTimeout > 0 {
		r.Body = &progressBody{ReadCloser: r.Body, rc: http.NewResponseController(w), header: rec.Header(), wait: f.cfg.BodyTimeout}
	}
	if len(r.TransferEncoding) > 0 && r.ProtoMajor == 1 {
		// The body was read by its Transfer-Encoding, any Content-Length
		// dropped (RFC 9112 6.1). A front proxy that read it by a
		// Content-Length would see other request boundaries: close the
		// connection after answering, so whatever follows on it is never
		// taken for a request.
		rec.Header().Set("Connection", "close")
	}
	if refused != nil {
		route = metrics.RouteRejected
		http.Error(rec, refused.msg, refused.status)
		return
	}
	if r.Method == "PURGE" {
		route = metrics.RoutePurge
		f.servePurge(rec, r, client)
		return
	}
	route = f.route(rec, r, p)
}

// route serves r by bypass, redirect, relay or from this node's store, as
// its policy says, and returns the route taken.
//
// A hot key has the first replication-factor ring members as owners: each
// serves it from its own store, a later owner filling from the first rather
// than the origin. A node that owns a hot key not at all relays it to one
// of its owners, picked per request, and keeps a local copy for as long as
// the object stays fresh.
func (f *Front) route(w http.ResponseWriter, r *http.Request, p *policy.Policy) string {
	if rec, ok := w.(*reply.Recorder); ok {
		rec.Strip = p.Targeted // the cluster's own targeted field is for this cluster only
	}
	if reason := bypassReason(r, p); p.Mode == pb.CacheMode_CACHE_MODE_BYPASS || reason != "" || p.Bypass(r) {
		f.bypass(w, r, p, reason)
		return metrics.RouteBypass
	}
	key := p.Key(hop.Scheme(r), r)
	if rec, ok := w.(*reply.Recorder); ok {
		rec.Key = key
	}
	if p.SliceSize > 0 && f.cfg.Owner.ServeSliced(w, r, key, p) {
		return metrics.RouteSliced
	}
	rt := f.cfg.Routes.Load()
	if rt == nil || p.Mode == pb.CacheMode_CACHE_MODE_LOCAL {
		f.cfg.Owner.Serve(w, r, key, p, nil, nil)
		return metrics.RouteLocal
	}
	hot := !p.AuthorizeEach && f.isHot(key, p) // a hot copy would serve without the origin's check
	replicas := 1
	if hot {
		f.cfg.HotKeys.Note(key, r)
		replicas = p.ReplicationFactor
	}
	var buf [4]*pb.Member
	owners := rt.Owners(buf[:0], key, replicas)
	if len(owners) == 0 {
		f.cfg.Owner.Serve(w, r, key, p, nil, nil)
		return metrics.RouteLocal
	}
	for i, o := range owners {
		if o.GetId() == f.cfg.ID {
			var from *pb.Member
			if i > 0 {
				from = owners[0] // a replica fills from the first owner
			}
			f.cfg.Owner.Serve(w, r, key, p, from, nil)
			return metrics.RouteLocal
		}
	}
	if hot && f.serveHotCopy(w, r, key, p) {
		return metrics.RouteLocal
	}
	// A hot key's owners share the requests relayed to it: each one goes
	// to an owner picked at random, the others tried after it. (A later
	// owner that lacks the object fills from the first, not the origin.)
	start := 0
	if len(owners) > 1 {
		start = rand.IntN(len(owners))
	}
	if owner := owners[start]; p.Mode == pb.CacheMode_CACHE_MODE_REDIRECT && owner.GetPublicUrl() != "" {
		redirect(w, r, owner)
		return metrics.RouteRedirect
	}
	for i := range owners {
		if f.relay(w, r, owners[(start+i)%len(owners)], key, p, hot) {
			f.cfg.Metrics.Totals.Relayed.Add(1)
			return metrics.RouteRelayed
		}
	}
	// No owner answered. The next ring member owns the key once the
	// owner leaves the ring, so it is the one to fill; if it is this node,
	// or it fails too, serve from here: an origin request, but the client
	// is served until the next epoch.
	f.cfg.Metrics.RelayFallback.Inc()
	if next := rt.Owners(buf[:0], key, len(owners)+1); len(next) > len(owners) {
		if alt := next[len(owners)]; alt.GetId() != f.cfg.ID && f.relay(w, r, alt, key, p, hot) {
			f.cfg.Metrics.Totals.Relayed.Add(1)
			return metrics.RouteRelayed
		}
	}
	f.cfg.Owner.Serve(w, r, key, p, nil, nil)
	return metrics.RouteLocal
}

// redirect answers 307 with the owner's public URL, so the body crosses the
// network once. The owner serves the redirected request as its own.
func redirect(w http.ResponseWriter, r *http.Request, owner *pb.Member) {
	w.Header().Set("Location", strings.TrimSuffix(owner.GetPublicUrl(), "/")+r.URL.RequestURI())
	w.Header().Set("X-Cache-Node", owner.GetId())
	w.WriteHeader(http.StatusTemporaryRedirect)
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

// bypass forwards a request that must not be cached straight to the origin.
//
// An unsafe method that succeeds invalidates what the cluster stores for
// its target (RFC 9111 4.4).
func (f *Front) bypass(w http.ResponseWriter, r *http.Request, p *policy.Policy, reason string) {
	// The origin timeout bounds waiting for the origin, never the transfer:
	// an upload or a download takes as long as it keeps moving. For a
	// request with a body, the origin transport's header timeout, which
	// starts once the body is sent, bounds the wait for the answer.
	timeout := cmp.Or(p.OriginTimeout, f.cfg.OriginTimeout)
	first := timeout
	if r.ContentLength != 0 {
		first = 0
	}
	ctx, watch := wait.Start(r.Context(), first, timeout)
	defer watch.Stop()
	resp, err := f.cfg.Origin.Fetch(httptrace.WithClientTrace(ctx, reply.PassInterim(w)), r, p, false, nil)
	// Cache-Status says why the request went forward (RFC 9211 2.2).
	m := httpcache.StatusMember{Node: f.statusName, Cache: httpcache.CacheBypass}
	switch reason {
	case "method":
		m.Cache = "METHOD"
	case "no-store":
		m.Cache = "REQUEST"
	}
	if err != nil && bodyStalled(r) {
		http.Error(w, "shardcache: the request body stopped coming (client body timeout)", http.StatusRequestTimeout)
		return
	}
	if err != nil {
		f.cfg.Metrics.OriginReqs.WithLabelValues("bypass", "error").Inc()
		w.Header()["Cache-Status"] = []string{m.String()}
		w.Header()["Proxy-Status"] = []string{httpcache.ProxyStatus(f.statusName, httpcache.ErrorType(err), httpcache.ErrorDetails(err))}
		http.Error(w, "shardcache: origin unreachable", http.StatusBadGateway)
		return
	}
	watch.Answered()
	resp.Body = watch.Body(resp.Body)
	defer resp.Body.Close()
	f.cfg.Metrics.OriginReqs.WithLabelValues("bypass", metrics.StatusClass(resp.StatusCode)).Inc()
	f.cfg.Metrics.Totals.OriginRequests.Add(1) // origin traffic, for the offload figure
	httpcache.RemoveHopByHop(resp.Header)
	reply.CopyHeader(w.Header(), resp.Header)
	w.Header().Set("X-Cache", httpcache.CacheBypass)
	m.Status = resp.StatusCode
	w.Header().Add("Cache-Status", m.String())
	if unsafeMethod(r.Method) && resp.StatusCode < 400 {
		f.invalidate(r, resp.Header)
	}
	w.WriteHeader(resp.StatusCode)
	reply.Pass(w, resp.Body)
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

// logAccess writes the request's access-log line, one JSON object. The
// caller decides whether the request is logged (the access log is on and
// the request sampled; 5xx answers always).
func (f *Front) logAccess(lr *logstream.Record) {
	f.cfg.AccessLog.LogAttrs(context.Background(), slog.LevelInfo, "request",
		slog.Time("start", lr.Start),
		slog.String("client", lr.Client),
		slog.String("forwarded_for", lr.ForwardedFor),
		slog.String("method", lr.Method),
		slog.String("host", lr.Host),
		slog.String("path", lr.Path),
		slog.Int("status", lr.Status),
		slog.Int64("bytes", lr.Bytes),
		slog.Float64("duration_ms", lr.DurationMS),
		slog.String("cache", lr.Cache),
		slog.String("route", lr.Route),
		slog.String("served_by", lr.ServedBy),
		slog.String("node", lr.Node),
		slog.String("trace_id", lr.TraceID),
	)
}

// secretParams are query parameters (lower case) whose values are
// credentials: signed URLs, API keys, tokens. Their values are never
// written to the access log or its streams.
var secretParams = map[string]bool{"token": true, "access_token": true, "id_token": true, "refresh_token": true,
	"auth": true, "authorization": true, "api_key": true, "apikey": true, "key": true, "password": true, "passwd": true,
	"secret": true, "sig": true, "signature": true, "session": true, "sessionid": true, "jwt": true, "code": true,
	"x-amz-signature": true, "x-amz-credential": true, "x-amz-security-token": true,
	"x-goog-signature": true, "x-goog-credential": true}

// loggedURI is u's request URI as the access log shows it: the values of
// secretParams replaced by REDACTED, the rest as sent.
func loggedURI(u *url.URL) string {
	uri := u.RequestURI()
	if u.RawQuery == "" {
		return uri
	}
	path, query, _ := strings.Cut(uri, "?")
	parts := strings.Split(query, "&")
	changed := false
	for i, part := range parts {
		name, _, hasValue := strings.Cut(part, "=")
		if n, err := url.QueryUnescape(name); err == nil && hasValue && secretParams[strings.ToLower(n)] {
			parts[i], changed = name+"=REDACTED", true
		}
	}
	if !changed {
		return uri
	}
	return path + "?" + strings.Join(parts, "&")
}

// ownerJudged reads, from the owner's Cache-Status member (the first), how
// its store judged the answer: whether it keeps it (a hit, or stored) and
// for how long it stays fresh.
func ownerJudged(h http.Header) (ttl time.Duration, storable bool) {
	v := h["Cache-Status"]
	if len(v) == 0 {
		return 0, false
	}
	m, _, _ := strings.Cut(v[0], ",")
	storable = strings.Contains(m, "; hit") || strings.Contains(m, "; stored")
	if _, after, ok := strings.Cut(m, "; ttl="); ok {
		end := strings.IndexByte(after, ';')
		if end < 0 {
			end = len(after)
		}
		if n, err := strconv.ParseInt(after[:end], 10, 64); err == nil {
			ttl = time.Duration(n) * time.Second
		}
	}
	return ttl, storable
}

// representationSize is the size of the object an answer is for, not of
// the bytes it sent: a range's whole, a HEAD's Content-Length; -1 when the
// answer does not say (a 304).
func representationSize(r *http.Request, rec *reply.Recorder) int64 {
	h := rec.Header()
	if rec.Status == http.StatusPartialContent {
		if _, _, total, ok := httpcache.ParseContentRange(h.Get("Content-Range")); ok && total >= 0 {
			return total
		}
	}
	if rec.Status == http.StatusNotModified {
		return -1
	}
	if r.Method == http.MethodHead {
		if n, err := strconv.ParseInt(h.Get("Content-Length"), 10, 64); err == nil {
			return n
		}
		return -1
	}
	return rec.Bytes
}
