package front

import (
	"context"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"go.opentelemetry.io/otel/attribute"

	"github.com/shardcache/shardcache/dataplane/hop"
	"github.com/shardcache/shardcache/dataplane/httpcache"
	"github.com/shardcache/shardcache/dataplane/internal/clientconn"
	"github.com/shardcache/shardcache/dataplane/internal/reply"
	"github.com/shardcache/shardcache/dataplane/logstream"
	"github.com/shardcache/shardcache/dataplane/metrics"
	"github.com/shardcache/shardcache/dataplane/owner"
	"github.com/shardcache/shardcache/sdk/redact"
)

// record counts and logs a client request once it is answered (or
// aborted), from the route it took and the Outcome it had: the metrics,
// the local-only estimate, the access log and its streams, the trace. A
// small answer's bytes leave after it is counted (the client port's server
// writes them once the handler returns); a broken one ends its connection
// with a reset.
func (f *Front) record(rec *reply.Recorder, req *owner.Request, route string, out owner.Outcome, client string) {
	r := req.HTTP
	if route != metrics.RoutePurge {
		f.cfg.Metrics.Totals.Requests.Add(1)
	}
	cache := out.Member.Cache
	if cache == httpcache.CacheHit {
		f.cfg.Metrics.Totals.Hits.Add(1)
	}
	if out.Member.Detail != "" {
		f.countReason(out.Member.Detail)
	}
	elapsed := time.Since(req.Now)
	f.cfg.Metrics.CountRequest(route, cache, methodLabel(r.Method), metrics.StatusClass(rec.Status))
	exemplar := ""
	if f.cfg.Tracer != nil {
		exemplar = sampledTraceID(r.Context())
	}
	f.cfg.Metrics.ObserveRoute(route, elapsed, rec.Bytes, exemplar)
	if c := f.cfg.Metrics.RouteBytes[route]; c != nil {
		c.Add(uint64(rec.Bytes))
	}
	if req.Key != "" && cache != httpcache.CacheBypass && cache != "" {
		f.cfg.Shadow.Observe(req.Key, representationSize(r, rec), out.Member.TTL, out.Kept(), req.Now)
	}
	// One record for the access log and the log streams, built only when
	// one of them takes it.
	logged := f.cfg.AccessLog != nil && (rec.Status >= 500 || f.cfg.AccessLogSample >= 1 || rand.Float64() < f.cfg.AccessLogSample)
	if streamed := f.cfg.Logs.Active(); logged || streamed {
		lr := logstream.Record{Start: req.Now, Client: client, ForwardedFor: redact.Printable(r.Header.Get("X-Forwarded-For")),
			Method: r.Method, Host: redact.Printable(r.Host), Path: redact.Printable(loggedURI(r.URL)), Proto: r.Proto, Status: rec.Status, Bytes: rec.Bytes,
			DurationMS: float64(elapsed.Microseconds()) / 1000, Cache: cache, Route: route, ServedBy: out.Node,
			Node: f.cfg.ID, TraceID: traceID(r.Context()), Referer: redact.Printable(redact.Query(r.Referer())), UserAgent: redact.Printable(r.UserAgent()),
			Key: redact.Printable(redact.Query(req.Policy.ShownKey(hop.Scheme(r), r, req.Key))), RequestID: req.ID, Reason: out.Member.Detail}
		if logged {
			f.logAccess(&lr)
		}
		if streamed {
			shared := lr // the streams keep it; the log's copy stays on the stack
			if req.Account != nil {
				shared.Full = fullDetail(r.Header, rec.Header(), req.Account)
			}
			f.cfg.Logs.Publish(&shared)
		}
	}
	if f.cfg.Tracer != nil {
		annotate(r.Context(), attribute.String("shardcache.node", f.cfg.ID), attribute.String("shardcache.route", route),
			attribute.String("shardcache.cache", cache), attribute.String("shardcache.request_id", req.ID),
			attribute.String("shardcache.reason", out.Member.Detail))
	}
	if cc := clientconn.From(r.Context()); rec.Broken && cc != nil && r.ProtoMajor == 1 {
		// A reset, not a close: an HTTP/1.0 client reading an answer of no
		// length to the close must not take it for whole.
		cc.Reset()
	}
	rec.AbortIfBroken()
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
		slog.String("proto", lr.Proto),
		slog.Int("status", lr.Status),
		slog.Int64("bytes", lr.Bytes),
		slog.Float64("duration_ms", lr.DurationMS),
		slog.String("cache", lr.Cache),
		slog.String("reason", lr.Reason),
		slog.String("route", lr.Route),
		slog.String("served_by", lr.ServedBy),
		slog.String("node", lr.Node),
		slog.String("trace_id", lr.TraceID),
		slog.String("request_id", lr.RequestID),
		slog.String("key", lr.Key),
		slog.String("referer", lr.Referer),
		slog.String("user_agent", lr.UserAgent),
	)
}

// loggedURI is u's request URI as the access log shows it: the values of
// credential parameters (redact.Secret) replaced by REDACTED, the rest as
// sent.
func loggedURI(u *url.URL) string {
	if u.RawQuery == "" {
		return u.RequestURI()
	}
	return redact.Query(u.RequestURI())
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
