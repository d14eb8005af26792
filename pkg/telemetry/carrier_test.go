package telemetry_test

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

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

// TestInjectAsPropagator: Inject and Traceparent write what the W3C
// propagator writes for the same span context, flags beyond sampled and
// random dropped, and tracestate when there is one.
func TestInjectAsPropagator(t *testing.T) {
	ts, err := trace.ParseTraceState("vendor=a,other=b")
	if err != nil {
		t.Fatal(err)
	}
	seed, withState := byte(1), false
	for _, flags := range []trace.TraceFlags{0, trace.FlagsSampled, trace.FlagsRandom, 0xff, 0x80} {
		cfg := trace.SpanContextConfig{TraceFlags: flags}
		seed += 37
		for j := range byte(16) {
			cfg.TraceID[j] = seed + j*7
		}
		for j := range byte(8) {
			cfg.SpanID[j] = seed ^ (j*13 + 250)
		}
		if withState = !withState; withState {
			cfg.TraceState = ts
		}
		ctx := trace.ContextWithSpanContext(context.Background(), trace.NewSpanContext(cfg))
		want := propagation.MapCarrier{}
		propagation.TraceContext{}.Inject(ctx, want)
		got := map[string][]string{}
		telemetry.Inject(ctx, got)
		if len(got) != len(want) {
			t.Errorf("flags %x: injected %v, the propagator %v", flags, got, want)
		}
		for k, v := range want {
			if g := got[k]; len(g) != 1 || g[0] != v {
				t.Errorf("flags %x: %s = %v, the propagator's %q", flags, k, g, v)
			}
		}
		if tp := telemetry.Traceparent(trace.SpanContextFromContext(ctx)); tp != want["traceparent"] {
			t.Errorf("flags %x: Traceparent %q, the propagator's %q", flags, tp, want["traceparent"])
		}
	}
	if tp := telemetry.Traceparent(trace.SpanContext{}); tp != "" {
		t.Errorf("Traceparent of no span context: %q", tp)
	}
}
