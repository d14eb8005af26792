package otelenv

import (
	"context"
	"errors"
	"testing"

	"go.opentelemetry.io/otel/trace"
)

func envOf(kv map[string]string) func(string) string {
	return func(k string) string { return kv[k] }
}

func TestWanted(t *testing.T) {
	for _, c := range []struct {
		env  map[string]string
		want bool
	}{
		{nil, false},
		{map[string]string{"OTEL_SERVICE_NAME": "x"}, false},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, true},
		{map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:4318/v1/traces"}, true},
		{map[string]string{"OTEL_TRACES_EXPORTER": "otlp"}, true},
		{map[string]string{"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, false},
		{map[string]string{"OTEL_SDK_DISABLED": "true", "OTEL_TRACES_EXPORTER": "otlp"}, false},
	} {
		got, err := Wanted(envOf(c.env))
		if err != nil || got != c.want {
			t.Errorf("Wanted(%v) = %v, %v; want %v", c.env, got, err, c.want)
		}
	}
}

// TestNothingSetIsNoop: with no OTEL_* variable the provider records
// nothing and has nothing to shut down.
func TestNothingSetIsNoop(t *testing.T) {
	p, err := New(context.Background(), envOf(nil), "agent")
	if err != nil {
		t.Fatal(err)
	}
	if p.Enabled {
		t.Fatal("enabled without any OTEL_* variable")
	}
	_, span := p.Tracer("x").Start(context.Background(), "s")
	if span.IsRecording() || span.SpanContext().IsValid() {
		t.Errorf("the no-op provider's span records (%v) or has a valid context (%v)", span.IsRecording(), span.SpanContext())
	}
	if err := p.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func TestEnabledRecords(t *testing.T) {
	for _, proto := range []string{"http/protobuf", "grpc"} {
		p, err := New(context.Background(), envOf(map[string]string{
			"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": proto,
		}), "agent")
		if err != nil {
			t.Fatalf("%s: %v", proto, err)
		}
		_, span := p.Tracer("x").Start(context.Background(), "s")
		if !p.Enabled || !span.IsRecording() {
			t.Errorf("%s: enabled %v, recording %v", proto, p.Enabled, span.IsRecording())
		}
		// The span is not ended: nothing to export, to a port where
		// nothing listens.
		if err := p.Shutdown(context.Background()); err != nil {
			t.Errorf("%s: shutdown: %v", proto, err)
		}
	}
}

func TestUnsupported(t *testing.T) {
	for _, env := range []map[string]string{
		{"OTEL_TRACES_EXPORTER": "zipkin"},
		{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"},
		{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "thrift"},
	} {
		if _, err := New(context.Background(), envOf(env), "agent"); !errors.Is(err, ErrConfig) {
			t.Errorf("New(%v) = %v, want ErrConfig", env, err)
		}
	}
}

// OTEL_TRACES_SAMPLER and OTEL_TRACES_SAMPLER_ARG choose the sampler, with
// the SDK's names and meanings; what the SDK would log and ignore is an
// error.
func TestSampler(t *testing.T) {
	for _, c := range []struct {
		sampler, arg, want string
	}{
		{"", "", "ParentBased{root:AlwaysOnSampler,remoteParentSampled:AlwaysOnSampler,remoteParentNotSampled:AlwaysOffSampler,localParentSampled:AlwaysOnSampler,localParentNotSampled:AlwaysOffSampler}"},
		{"always_on", "", "AlwaysOnSampler"},
		{" Always_Off ", "", "AlwaysOffSampler"},
		{"traceidratio", "0.25", "TraceIDRatioBased{0.25}"},
		{"traceidratio", "", "TraceIDRatioBased{1}"},
		{"parentbased_always_off", "", "ParentBased{root:AlwaysOffSampler,remoteParentSampled:AlwaysOnSampler,remoteParentNotSampled:AlwaysOffSampler,localParentSampled:AlwaysOnSampler,localParentNotSampled:AlwaysOffSampler}"},
		{"parentbased_traceidratio", "0.1", "ParentBased{root:TraceIDRatioBased{0.1},remoteParentSampled:AlwaysOnSampler,remoteParentNotSampled:AlwaysOffSampler,localParentSampled:AlwaysOnSampler,localParentNotSampled:AlwaysOffSampler}"},
	} {
		s, err := Sampler(envOf(map[string]string{"OTEL_TRACES_SAMPLER": c.sampler, "OTEL_TRACES_SAMPLER_ARG": c.arg}))
		if err != nil || s.Description() != c.want {
			t.Errorf("Sampler(%q, %q) = %v, %v; want %s", c.sampler, c.arg, s, err, c.want)
		}
	}
	for _, c := range [][2]string{{"jaeger_remote", ""}, {"xray", ""}, {"traceidratio", "1.5"}, {"parentbased_traceidratio", "-0.1"}, {"traceidratio", "half"}, {"traceidratio", "NaN"}} {
		if _, err := Sampler(envOf(map[string]string{"OTEL_TRACES_SAMPLER": c[0], "OTEL_TRACES_SAMPLER_ARG": c[1]})); !errors.Is(err, ErrConfig) {
			t.Errorf("Sampler(%q, %q): %v, want ErrConfig", c[0], c[1], err)
		}
	}
	if _, err := New(context.Background(), envOf(map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_TRACES_SAMPLER": "sometimes"}), "agent"); !errors.Is(err, ErrConfig) {
		t.Errorf("New with an unsupported sampler: %v, want ErrConfig", err)
	}
	// Wanted, which toolworker checks with its flags, refuses it too, but
	// only where traces are wanted.
	if _, err := Wanted(envOf(map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318", "OTEL_TRACES_SAMPLER": "sometimes"})); !errors.Is(err, ErrConfig) {
		t.Errorf("Wanted with an unsupported sampler: %v, want ErrConfig", err)
	}
	if ok, err := Wanted(envOf(map[string]string{"OTEL_TRACES_SAMPLER": "sometimes"})); ok || err != nil {
		t.Errorf("Wanted without an exporter, an unsupported sampler: %v, %v; want false, nil", ok, err)
	}
}

// The provider New builds samples as its getenv says: at a ratio of 0 a
// root span is not recorded, while a span whose remote parent was sampled
// is (parent based), and one whose parent was not sampled is not.
func TestNewSamples(t *testing.T) {
	p, err := New(context.Background(), envOf(map[string]string{
		"OTEL_TRACES_EXPORTER": "otlp", "OTEL_TRACES_SAMPLER": "parentbased_traceidratio", "OTEL_TRACES_SAMPLER_ARG": "0",
	}), "agent")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = p.Shutdown(context.Background()) }()
	tr := p.Tracer("x")
	_, root := tr.Start(context.Background(), "root")
	if root.IsRecording() || !root.SpanContext().IsValid() || root.SpanContext().IsSampled() {
		t.Errorf("root span: recording %v, context %v; want a valid, unsampled, unrecorded span", root.IsRecording(), root.SpanContext())
	}
	for _, sampled := range []bool{true, false} {
		parent := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1}, SpanID: trace.SpanID{1}, Remote: true})
		if sampled {
			parent = parent.WithTraceFlags(trace.FlagsSampled)
		}
		_, child := tr.Start(trace.ContextWithRemoteSpanContext(context.Background(), parent), "child")
		if child.IsRecording() != sampled {
			t.Errorf("child of a parent sampled %v: recording %v", sampled, child.IsRecording())
		}
	}
}
