// Package otelenv builds the binaries' OpenTelemetry tracer provider from
// the standard OTEL_* environment variables (SPEC §14): OTLP over HTTP
// (protobuf) or gRPC when an OTLP endpoint or OTEL_TRACES_EXPORTER=otlp is
// set, and a no-op provider (nothing exported, nothing recorded) when no
// variable asks for traces. Only the binaries use it: library code is given
// a provider (agent.Config, remote.ClientConfig, worker.Config).
package otelenv

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// ErrConfig is the error of OTEL_* variables that cannot be honoured (an
// exporter or protocol offload does not ship).
var ErrConfig = errors.New("otelenv: unsupported OpenTelemetry configuration")

// Provider is the tracer provider of a process and how to flush and stop
// it.
type Provider struct {
	trace.TracerProvider
	// Enabled reports whether spans are recorded and exported.
	Enabled bool
	sdk     *sdktrace.TracerProvider
}

// Shutdown exports the spans still buffered and stops the exporter; it is
// a no-op for the no-op provider.
func (p *Provider) Shutdown(ctx context.Context) error {
	if p.sdk == nil {
		return nil
	}
	if err := p.sdk.Shutdown(ctx); err != nil {
		return fmt.Errorf("otelenv: shutdown: %w", err)
	}
	return nil
}

// FlushTimeout bounds the export of the spans left when a process exits:
// an unreachable collector delays the exit by at most that.
const FlushTimeout = 5 * time.Second

// ShutdownWithin is [Provider.Shutdown] bounded by [FlushTimeout]; an
// error is written to warn as a warning of process name.
func (p *Provider) ShutdownWithin(warn io.Writer, name string) {
	ctx, cancel := context.WithTimeout(context.Background(), FlushTimeout)
	defer cancel()
	if err := p.Shutdown(ctx); err != nil {
		fmt.Fprintln(warn, name+": warning: traces:", err)
	}
}

// Wanted reports whether getenv asks for traces: OTEL_SDK_DISABLED is not
// true, OTEL_TRACES_EXPORTER is not none, and either it is otlp or an OTLP
// endpoint (OTEL_EXPORTER_OTLP_ENDPOINT, OTEL_EXPORTER_OTLP_TRACES_ENDPOINT)
// is set.
func Wanted(getenv func(string) string) (bool, error) {
	if strings.EqualFold(strings.TrimSpace(getenv("OTEL_SDK_DISABLED")), "true") {
		return false, nil
	}
	switch exp := strings.ToLower(strings.TrimSpace(getenv("OTEL_TRACES_EXPORTER"))); exp {
	case "none":
		return false, nil
	case "otlp":
		return true, nil
	case "":
		return getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != "", nil
	default:
		return false, fmt.Errorf("%w: OTEL_TRACES_EXPORTER=%s (offload exports traces with otlp, or none)", ErrConfig, exp)
	}
}

// New returns the provider getenv asks for, named service (the resource's
// service.name unless OTEL_SERVICE_NAME or OTEL_RESOURCE_ATTRIBUTES name
// one). The exporter itself reads the rest of the OTLP variables (endpoint,
// headers, timeout, compression, certificates), the SDK the sampler
// (OTEL_TRACES_SAMPLER, default parentbased_always_on) and the batch
// processor's (OTEL_BSP_*).
func New(ctx context.Context, getenv func(string) string, service string) (*Provider, error) {
	ok, err := Wanted(getenv)
	if err != nil {
		return nil, err
	}
	if !ok {
		return &Provider{TracerProvider: noop.NewTracerProvider()}, nil
	}
	protocol := strings.TrimSpace(getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"))
	if protocol == "" {
		protocol = strings.TrimSpace(getenv("OTEL_EXPORTER_OTLP_PROTOCOL"))
	}
	var exp sdktrace.SpanExporter
	switch protocol {
	case "", "http/protobuf":
		exp, err = otlptracehttp.New(ctx)
	case "grpc":
		exp, err = otlptracegrpc.New(ctx)
	default:
		return nil, fmt.Errorf("%w: OTEL_EXPORTER_OTLP_PROTOCOL=%s (offload speaks http/protobuf and grpc)", ErrConfig, protocol)
	}
	if err != nil {
		return nil, fmt.Errorf("otelenv: OTLP exporter: %w", err)
	}
	res, err := resource.New(ctx,
		resource.WithAttributes(attribute.String("service.name", service)),
		resource.WithTelemetrySDK(),
		resource.WithFromEnv())
	if err != nil && res == nil {
		_ = exp.Shutdown(ctx)
		return nil, fmt.Errorf("otelenv: resource: %w", err)
	}
	sdk := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	return &Provider{TracerProvider: sdk, Enabled: true, sdk: sdk}, nil
}
