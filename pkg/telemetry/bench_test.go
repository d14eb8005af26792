package telemetry_test

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel/trace"

	"github.com/offload-dev/offload/pkg/telemetry"
)

// BenchmarkUntracedSpan is what an untraced call pays per span: the no-op
// tracer's Start, the IsRecording check that skips the attributes, End,
// and an Inject that writes nothing.
func BenchmarkUntracedSpan(b *testing.B) {
	tr := telemetry.Tracer(nil)
	h := map[string][]string{}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		sctx, span := tr.Start(ctx, "send tools.task.lookup")
		if span.IsRecording() {
			b.Fatal("the no-op span records")
		}
		telemetry.Inject(sctx, h)
		span.End()
	}
}

// BenchmarkTraceparent is the traceparent a traced dispatch writes into
// its task's field and headers.
func BenchmarkTraceparent(b *testing.B) {
	sc := telemetry.ParseTraceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	h := map[string][]string{}
	ctx := trace.ContextWithSpanContext(context.Background(), sc)
	b.ReportAllocs()
	for b.Loop() {
		if telemetry.Traceparent(sc) == "" {
			b.Fatal("no traceparent")
		}
		telemetry.Inject(ctx, h)
	}
}
