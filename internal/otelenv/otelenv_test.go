package otelenv

import (
	"context"
	"errors"
	"testing"
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
