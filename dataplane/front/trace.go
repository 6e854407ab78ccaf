package front

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
)

// annotate adds attributes to the request's span, if it is traced.
// Callers check that the node traces first, so that an untraced request
// builds no attributes.
func annotate(ctx context.Context, kv ...attribute.KeyValue) {
	if span := trace.SpanFromContext(ctx); span.IsRecording() {
		span.SetAttributes(kv...)
	}
}

// traceID is the request's trace id, "" when it is not traced.
func traceID(ctx context.Context) string {
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		return sc.TraceID().String()
	}
	return ""
}

// sampledTraceID is the request's trace id when its trace is sampled (and
// so exported), "" otherwise: an exemplar links a latency outlier to a
// trace the backend holds.
func sampledTraceID(ctx context.Context) string {
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() && sc.IsSampled() {
		return sc.TraceID().String()
	}
	return ""
}
