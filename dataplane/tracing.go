package dataplane

import (
	"net/http"

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// tracerName names the node's spans' instrumentation scope.
const tracerName = "github.com/shardcache/shardcache/dataplane"

// httpTraceOptions are those of every traced listener and transport: the
// node's provider, W3C trace context.
func httpTraceOptions(tp trace.TracerProvider, name func(*http.Request) string) []otelhttp.Option {
	return []otelhttp.Option{
		otelhttp.WithTracerProvider(tp),
		otelhttp.WithPropagators(propagation.TraceContext{}),
		otelhttp.WithSpanNameFormatter(func(_ string, r *http.Request) string { return name(r) }),
	}
}

// traceHandler traces h's requests as server spans named name, when the
// node traces.
func (n *Node) traceHandler(h http.Handler, name string) http.Handler {
	if n.cfg.TracerProvider == nil {
		return h
	}
	return otelhttp.NewHandler(h, name, httpTraceOptions(n.cfg.TracerProvider, func(*http.Request) string { return name })...)
}

// traceTransport traces a transport's requests as client spans.
func (n *Node) traceTransport(rt http.RoundTripper, prefix string) http.RoundTripper {
	if n.cfg.TracerProvider == nil {
		return rt
	}
	return otelhttp.NewTransport(rt, httpTraceOptions(n.cfg.TracerProvider, func(r *http.Request) string { return prefix + " " + r.Method })...)
}
