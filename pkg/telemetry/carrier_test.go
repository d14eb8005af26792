package telemetry_test

import (
	"context"
	"testing"

	"github.com/offload-dev/offload/pkg/telemetry"
)

// TestExtractAnyCase: a traceparent set by a person (`nats pub -H
// Traceparent:…`) is read whatever the case of its name; a malformed one
// or none gives no span context.
func TestExtractAnyCase(t *testing.T) {
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	for _, key := range []string{"traceparent", "Traceparent", "TRACEPARENT"} {
		sc := telemetry.SpanContextOf(map[string][]string{key: {tp}})
		if !sc.IsValid() || sc.TraceID().String() != "4bf92f3577b34da6a3ce929d0e0e4736" || sc.SpanID().String() != "00f067aa0ba902b7" || !sc.IsRemote() {
			t.Errorf("%s: span context %v", key, sc)
		}
	}
	for _, h := range []map[string][]string{nil, {}, {"traceparent": {"garbage"}}} {
		if sc := telemetry.SpanContextOf(h); sc.IsValid() {
			t.Errorf("%v: valid span context %v", h, sc)
		}
	}
}

// TestInjectRoundTrip: what Inject writes, Extract reads; a context without
// a span writes nothing.
func TestInjectRoundTrip(t *testing.T) {
	h := map[string][]string{}
	telemetry.Inject(context.Background(), h)
	if len(h) != 0 {
		t.Fatalf("Inject without a span wrote %v", h)
	}
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	ctx := telemetry.Extract(context.Background(), map[string][]string{"Traceparent": {tp}})
	telemetry.Inject(ctx, h)
	if got := h[telemetry.TraceparentHeader]; len(got) != 1 || got[0] != tp {
		t.Errorf("injected %v, want traceparent %s", h, tp)
	}
}
