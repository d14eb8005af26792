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
	"math"
	"strconv"
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
// is set. When they are wanted, an unsupported sampler is an error too
// ([Sampler]), so that a binary checking Wanted first refuses it as a usage
// error.
func Wanted(getenv func(string) string) (bool, error) {
	if strings.EqualFold(strings.TrimSpace(getenv("OTEL_SDK_DISABLED")), "true") {
		return false, nil
	}
	var wanted bool
	switch exp := strings.ToLower(strings.TrimSpace(getenv("OTEL_TRACES_EXPORTER"))); exp {
	case "none":
		return false, nil
	case "otlp":
		wanted = true
	case "":
		wanted = getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != ""
	default:
		return false, fmt.Errorf("%w: OTEL_TRACES_EXPORTER=%s (offload exports traces with otlp, or none)", ErrConfig, exp)
	}
	if wanted {
		if _, err := Sampler(getenv); err != nil {
			return false, err
		}
	}
	return wanted, nil
}

// New returns the provider getenv asks for, named service (the resource's
// service.name unless OTEL_SERVICE_NAME or OTEL_RESOURCE_ATTRIBUTES name
// one), sampling as OTEL_TRACES_SAMPLER and OTEL_TRACES_SAMPLER_ARG say
// ([Sampler]: an unsupported value is an error here, where the SDK would
// log it and sample everything). The exporter itself reads the rest of the
// OTLP variables (endpoint, headers, timeout, compression, certificates)
// and the SDK the batch processor's (OTEL_BSP_*).
func New(ctx context.Context, getenv func(string) string, service string) (*Provider, error) {
	ok, err := Wanted(getenv)
	if err != nil {
		return nil, err
	}
	if !ok {
		return &Provider{TracerProvider: noop.NewTracerProvider()}, nil
	}
	sampler, err := Sampler(getenv) // checked by Wanted
	if err != nil {
		return nil, err
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
	sdk := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res), sdktrace.WithSampler(sampler))
	return &Provider{TracerProvider: sdk, Enabled: true, sdk: sdk}, nil
}

// The samplers of OTEL_TRACES_SAMPLER that the Go SDK ships (the
// specification's others, jaeger_remote and xray among them, need
// contributed packages offload does not ship).
const (
	samplerAlwaysOn                = "always_on"
	samplerAlwaysOff               = "always_off"
	samplerTraceIDRatio            = "traceidratio"
	samplerParentBasedAlwaysOn     = "parentbased_always_on"
	samplerParentBasedAlwaysOff    = "parentbased_always_off"
	samplerParentBasedTraceIDRatio = "parentbased_traceidratio"
)

// Sampler returns the sampler getenv asks for, with the SDK's names and
// meanings: OTEL_TRACES_SAMPLER always_on, always_off, traceidratio,
// parentbased_always_on (the default, when unset), parentbased_always_off
// or parentbased_traceidratio; the ratio samplers' ratio is
// OTEL_TRACES_SAMPLER_ARG, a number from 0 to 1 (1 when unset). A parent
// based sampler follows the parent's decision when there is one (a task's
// traceparent from its dispatch, a sampled flag of 0 included) and applies
// its own to a root. Another sampler, or an argument that is no such
// number, is an [ErrConfig] error.
func Sampler(getenv func(string) string) (sdktrace.Sampler, error) {
	name := strings.ToLower(strings.TrimSpace(getenv("OTEL_TRACES_SAMPLER")))
	arg := strings.TrimSpace(getenv("OTEL_TRACES_SAMPLER_ARG"))
	ratio := func() (float64, error) {
		if arg == "" {
			return 1, nil
		}
		r, err := strconv.ParseFloat(arg, 64)
		if err != nil || r < 0 || r > 1 || math.IsNaN(r) {
			return 0, fmt.Errorf("%w: OTEL_TRACES_SAMPLER_ARG=%s (the ratio of %s is a number from 0 to 1)", ErrConfig, arg, name)
		}
		return r, nil
	}
	switch name {
	case "", samplerParentBasedAlwaysOn:
		return sdktrace.ParentBased(sdktrace.AlwaysSample()), nil
	case samplerAlwaysOn:
		return sdktrace.AlwaysSample(), nil
	case samplerAlwaysOff:
		return sdktrace.NeverSample(), nil
	case samplerParentBasedAlwaysOff:
		return sdktrace.ParentBased(sdktrace.NeverSample()), nil
	case samplerTraceIDRatio:
		r, err := ratio()
		if err != nil {
			return nil, err
		}
		return sdktrace.TraceIDRatioBased(r), nil
	case samplerParentBasedTraceIDRatio:
		r, err := ratio()
		if err != nil {
			return nil, err
		}
		return sdktrace.ParentBased(sdktrace.TraceIDRatioBased(r)), nil
	default:
		return nil, fmt.Errorf("%w: OTEL_TRACES_SAMPLER=%s (offload samples with always_on, always_off, traceidratio, parentbased_always_on, parentbased_always_off or parentbased_traceidratio)", ErrConfig, name)
	}
}
