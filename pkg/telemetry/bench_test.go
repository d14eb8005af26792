package telemetry_test

import (
	"context"
	"testing"

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
