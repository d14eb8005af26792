package telemetry

import (
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// ScopeName is the instrumentation scope of every offload span.
const ScopeName = "github.com/offload-dev/offload"

// Tracer returns the tracer of tp, or a no-op tracer when tp is nil: code
// that was given no provider records nothing and costs no more than the
// no-op's calls.
func Tracer(tp trace.TracerProvider) trace.Tracer {
	if tp == nil {
		return noop.NewTracerProvider().Tracer(ScopeName)
	}
	return tp.Tracer(ScopeName)
}
