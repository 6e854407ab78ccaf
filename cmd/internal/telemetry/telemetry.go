// Package telemetry sets up OpenTelemetry tracing for shardcache's
// binaries from the standard OTEL_* environment variables: with neither
// OTEL_EXPORTER_OTLP_ENDPOINT nor OTEL_EXPORTER_OTLP_TRACES_ENDPOINT set,
// or with OTEL_TRACES_EXPORTER=none, there is no tracing and no cost.
// Spans are exported over OTLP/gRPC in batches; OTEL_SERVICE_NAME,
// OTEL_RESOURCE_ATTRIBUTES, OTEL_TRACES_SAMPLER and the exporter's own
// variables (headers, timeout, certificate) apply as the specification says.
package telemetry

import (
	"context"
	"fmt"
	"os"
	"time"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
)

// Enabled reports whether the environment asks for traces.
func Enabled() bool {
	if os.Getenv("OTEL_TRACES_EXPORTER") == "none" || os.Getenv("OTEL_SDK_DISABLED") == "true" {
		return false
	}
	return os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != ""
}

// Tracing returns the tracer provider of a process running service as
// instance, and the function that flushes and stops it; a nil provider
// when tracing is off.
func Tracing(ctx context.Context, service, instance string) (trace.TracerProvider, func(), error) {
	if !Enabled() {
		return nil, func() {}, nil
	}
	exp, err := otlptracegrpc.New(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("OTLP trace exporter: %w", err)
	}
	res, err := resource.New(ctx,
		resource.WithAttributes(semconv.ServiceName(service), semconv.ServiceInstanceID(instance)),
		resource.WithFromEnv(), // OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES win
	)
	if err != nil {
		return nil, nil, fmt.Errorf("trace resource: %w", err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	return tp, func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = tp.Shutdown(sctx)
	}, nil
}
