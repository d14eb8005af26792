package telemetry_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"

	"github.com/offload-dev/offload/pkg/telemetry"
)

// TestLogHandlerAddsTraceIDs: a record logged with a traced context
// carries trace_id and span_id, also through With; one without has none.
func TestLogHandlerAddsTraceIDs(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(telemetry.LogHandler(slog.NewJSONHandler(&buf, nil))).With(slog.String("k", "v"))
	ctx := telemetry.Extract(context.Background(), map[string][]string{
		"traceparent": {"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}})
	log.InfoContext(ctx, "traced")
	log.Info("plain")
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("lines: %q", lines)
	}
	if !strings.Contains(lines[0], `"trace_id":"4bf92f3577b34da6a3ce929d0e0e4736","span_id":"00f067aa0ba902b7"`) || !strings.Contains(lines[0], `"k":"v"`) {
		t.Errorf("traced line: %s", lines[0])
	}
	if strings.Contains(lines[1], "trace_id") {
		t.Errorf("plain line: %s", lines[1])
	}
}
