// Package tracing traces a node's listeners and transports with
// OpenTelemetry (W3C trace context), when the node traces at all.
package tracing

import (
	"net/http"

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// Scope names the node's spans' instrumentation scope.
const Scope = "github.com/shardcache/shardcache/dataplane"

// options are those of every traced listener and transport: the node's
// provider, W3C trace context.
func options(tp trace.TracerProvider, name func(*http.Request) string) []otelhttp.Option {
	return []otelhttp.Option{
		otelhttp.WithTracerProvider(tp),
		otelhttp.WithPropagators(propagation.TraceContext{}),
		otelhttp.WithSpanNameFormatter(func(_ string, r *http.Request) string { return name(r) }),
	}
}

// Handler traces h's requests as server spans named name; h itself when
// tp is nil (the node does not trace).
func Handler(tp trace.TracerProvider, h http.Handler, name string) http.Handler {
	if tp == nil {
		return h
	}
	return otelhttp.NewHandler(h, name, options(tp, func(*http.Request) string { return name })...)
}

// Transport traces rt's requests as client spans named prefix and the
// method; rt itself when tp is nil.
func Transport(tp trace.TracerProvider, rt http.RoundTripper, prefix string) http.RoundTripper {
	if tp == nil {
		return rt
	}
	return otelhttp.NewTransport(rt, options(tp, func(r *http.Request) string { return prefix + " " + r.Method })...)
}
