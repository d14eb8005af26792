package telemetry_test

import (
	"context"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

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

// BenchmarkSpanCost is what a worker's task span costs (start, two
// attributes when it records, its trace context injected, end) with the
// no-op provider, and with the SDK's (batched to an exporter that drops
// the spans) under a remote parent that was not sampled and one that was:
// the unsampled calls of a parent-based ratio sampler, and the sampled
// ones less their export.
func BenchmarkSpanCost(b *testing.B) {
	unsampled := telemetry.ParseTraceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00")
	run := func(b *testing.B, tp trace.TracerProvider, parent trace.SpanContext) {
		tr := tp.Tracer("bench")
		ctx := trace.ContextWithRemoteSpanContext(context.Background(), parent)
		h := map[string][]string{}
		b.ReportAllocs()
		for b.Loop() {
			sctx, span := tr.Start(ctx, "process tools.task.lookup")
			if span.IsRecording() {
				span.SetAttributes(telemetry.MessagingSystem.String(telemetry.MessagingSystemNATS), telemetry.OffloadWorker.String("w"))
			}
			telemetry.Inject(sctx, h)
			span.End()
		}
	}
	sdk := func(b *testing.B) trace.TracerProvider {
		tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(tracetest.NewNoopExporter()))
		b.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
		return tp
	}
	b.Run("noop", func(b *testing.B) { run(b, noop.NewTracerProvider(), unsampled) })
	b.Run("unsampled", func(b *testing.B) { run(b, sdk(b), unsampled) })
	b.Run("sampled", func(b *testing.B) { run(b, sdk(b), unsampled.WithTraceFlags(trace.FlagsSampled)) })
}
