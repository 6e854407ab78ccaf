// Package tracing traces a node's listeners and transports with
// OpenTelemetry (W3C trace context), when the node traces at all.
package tracing

import (
	"net/http"

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/shardcache/shardcache/sdk/redact"
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
// tp is nil (the node does not trace). A request continues the trace its
// traceparent names, sampled as it says, only when trusted says so (nil:
// every request; the peer hop trusts the requests it serves, a member's); any
// other starts a trace of its own, sampled as the node's sampler decides,
// with a link to the trace it came with, and its trace context and baggage
// fields go no further. A client on the open port must not choose for the
// node what is recorded and exported (a sampled flag on every request),
// nor put the node's spans into a trace of its making.
func Handler(tp trace.TracerProvider, h http.Handler, name string, trusted func(*http.Request) bool) http.Handler {
	if tp == nil {
		return h
	}
	opts := options(tp, func(*http.Request) string { return name })
	if trusted != nil {
		opts = append(opts, otelhttp.WithPublicEndpointFn(func(r *http.Request) bool { return !trusted(r) }))
		h = dropContext(h, trusted)
	}
	return otelhttp.NewHandler(h, name, opts...)
}

// contextFields are the W3C fields of a trace context and its baggage.
var contextFields = []string{"Traceparent", "Tracestate", "Baggage"}

// dropContext deletes the trace context fields of the requests trusted
// refuses before h sees them: their trace is not continued, so their
// tracestate (a vendor's sampling say, OpenTelemetry's "ot=th:0") and
// baggage would go on to the owner and the origin beside the node's own
// traceparent, about a trace they are not of.
func dropContext(h http.Handler, trusted func(*http.Request) bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !trusted(r) {
			for _, k := range contextFields {
				delete(r.Header, k)
			}
		}
		h.ServeHTTP(w, r)
	})
}

// Transport traces rt's requests as client spans named prefix and the
// method; rt itself when tp is nil. A span's url.full has its query's
// credentials REDACTED (redactURL).
func Transport(tp trace.TracerProvider, rt http.RoundTripper, prefix string) http.RoundTripper {
	if tp == nil {
		return rt
	}
	return otelhttp.NewTransport(redactURL{rt}, options(tp, func(r *http.Request) string { return prefix + " " + r.Method })...)
}

// redactURL replaces the url.full otelhttp gives a client span (the URL as
// requested, a signed URL's signature and a ?token= included) with the URL
// as logs show it (redact.Query): whoever reads traces must not read
// clients' credentials. It runs inside otelhttp's transport, once the
// span has started.
type redactURL struct{ rt http.RoundTripper }

func (t redactURL) RoundTrip(r *http.Request) (*http.Response, error) {
	if span := trace.SpanFromContext(r.Context()); span.IsRecording() && r.URL.RawQuery != "" {
		u := *r.URL
		u.User = nil
		span.SetAttributes(attribute.String("url.full", redact.Query(u.String())))
	}
	return t.rt.RoundTrip(r)
}
