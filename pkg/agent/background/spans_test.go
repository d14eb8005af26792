package background_test

import (
	"context"
	"strings"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/offload-dev/offload/pkg/agent"
	"github.com/offload-dev/offload/pkg/agent/background"
	"github.com/offload-dev/offload/pkg/llm"
	"github.com/offload-dev/offload/pkg/tool"
)

// TestBackgroundResultSpan: a background call's result injected as a
// follow-up is a span (background_result NAME) in the call's trace, a
// child of the call's execute_tool span.
func TestBackgroundResultSpan(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	bg := tool.Func("bg", "", func(context.Context, *tool.RunContext, struct{}) (string, error) {
		return "bg result", nil
	}, tool.Meta(map[string]any{"background": true}))
	m := model(func(n int, req *llm.Request) *llm.Response {
		if n == 0 {
			return calls(call("bg", "c1", `{}`))
		}
		if strings.Contains(mustJSON(t, req.Messages), "completed.") {
			return text("done")
		}
		return text("waiting")
	})
	a := newAgentCfg(t, agent.Config{Model: m, TracerProvider: tp,
		Capabilities: []agent.Capability{background.Tools(background.Config{})}}, bg)
	res, err := a.Run(t.Context(), "go", nil)
	if err != nil || res.Output != "done" {
		t.Fatalf("run: %v, %v", res, err)
	}
	var callSpan, result sdktrace.ReadOnlySpan
	for _, s := range rec.Ended() {
		switch s.Name() {
		case "execute_tool bg":
			callSpan = s
		case "background_result bg":
			result = s
		}
	}
	if callSpan == nil || result == nil {
		t.Fatalf("spans: %v", rec.Ended())
	}
	if result.Parent().SpanID() != callSpan.SpanContext().SpanID() || result.SpanContext().TraceID() != callSpan.SpanContext().TraceID() {
		t.Errorf("background_result's parent %v, want the call's %v", result.Parent().SpanID(), callSpan.SpanContext().SpanID())
	}
}
