package agent_test

import (
	"context"
	"encoding/json"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/offload-dev/offload/pkg/agent"
	"github.com/offload-dev/offload/pkg/llm"
	"github.com/offload-dev/offload/pkg/message"
	"github.com/offload-dev/offload/pkg/tool"
)

// TestRunSpans: a traced run records invoke_agent with a chat span per
// model request (model and token usage) and an execute_tool span per call
// (the tool's context is the span's: a dispatch is its child), and every
// event names the run's span (trace_id, span_id in --json).
func TestRunSpans(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	var inTool trace.SpanContext
	echo := tool.Func("echo", "", func(ctx context.Context, _ *tool.RunContext, _ struct{}) (string, error) {
		inTool = trace.SpanContextFromContext(ctx)
		return "ok", nil
	})
	rs := []*llm.Response{calls(call("echo", "c1", `{}`)), text("done")}
	for _, r := range rs {
		r.Usage = message.Usage{InputTokens: 7, OutputTokens: 3}
	}
	m := turns(rs...)
	a := newAgentCfg(t, agent.Config{Model: m, TracerProvider: tp}, echo)
	var events []agent.Event
	if _, err := a.Run(context.Background(), "go", &agent.RunOptions{OnEvent: func(e agent.Event) { events = append(events, e) }}); err != nil {
		t.Fatal(err)
	}
	spans := map[string][]sdktrace.ReadOnlySpan{}
	for _, s := range rec.Ended() {
		spans[s.Name()] = append(spans[s.Name()], s)
	}
	if len(spans["invoke_agent"]) != 1 || len(spans["chat fn"]) != 2 || len(spans["execute_tool echo"]) != 1 {
		t.Fatalf("spans: %v", spans)
	}
	run := spans["invoke_agent"][0]
	attrs := func(s sdktrace.ReadOnlySpan) map[string]any {
		out := map[string]any{}
		for _, kv := range s.Attributes() {
			out[string(kv.Key)] = kv.Value.AsInterface()
		}
		return out
	}
	for _, c := range spans["chat fn"] {
		a := attrs(c)
		if c.Parent().SpanID() != run.SpanContext().SpanID() || a["gen_ai.request.model"] != "fn" ||
			a["gen_ai.usage.input_tokens"] != int64(7) || a["gen_ai.usage.output_tokens"] != int64(3) || a["gen_ai.operation.name"] != "chat" {
			t.Errorf("chat span: parent %v, attributes %v", c.Parent().SpanID(), a)
		}
	}
	call := spans["execute_tool echo"][0]
	if a := attrs(call); a["gen_ai.tool.name"] != "echo" || a["gen_ai.tool.call.id"] != "c1" || call.Parent().SpanID() != run.SpanContext().SpanID() {
		t.Errorf("tool span: %v", a)
	}
	if inTool.SpanID() != call.SpanContext().SpanID() {
		t.Errorf("the tool ran in span %v, want its execute_tool span %v", inTool.SpanID(), call.SpanContext().SpanID())
	}
	for _, e := range events {
		if e.TraceID != run.SpanContext().TraceID().String() || e.SpanID != run.SpanContext().SpanID().String() {
			t.Errorf("event %s: trace %q span %q, want the run's", e.Type, e.TraceID, e.SpanID)
		}
	}
	var line map[string]any
	if err := json.Unmarshal(mustMarshal(t, events[0]), &line); err != nil || line["trace_id"] != run.SpanContext().TraceID().String() {
		t.Errorf("--json line %v (%v): no trace_id", line, err)
	}
}

// TestUntracedRunNamesNoTrace: without a TracerProvider, events carry no
// trace IDs and a tool sees no span.
func TestUntracedRunNamesNoTrace(t *testing.T) {
	var inTool trace.SpanContext
	echo := tool.Func("echo", "", func(ctx context.Context, _ *tool.RunContext, _ struct{}) (string, error) {
		inTool = trace.SpanContextFromContext(ctx)
		return "ok", nil
	})
	a := newAgent(t, turns(calls(call("echo", "c1", `{}`)), text("done")), echo)
	var events []agent.Event
	if _, err := a.Run(context.Background(), "go", &agent.RunOptions{OnEvent: func(e agent.Event) { events = append(events, e) }}); err != nil {
		t.Fatal(err)
	}
	if inTool.IsValid() {
		t.Errorf("the tool ran in a span: %v", inTool)
	}
	for _, e := range events {
		raw := mustMarshal(t, e)
		var line map[string]any
		if err := json.Unmarshal(raw, &line); err != nil {
			t.Fatal(err)
		}
		if _, ok := line["trace_id"]; ok || e.TraceID != "" {
			t.Errorf("untraced event %s names a trace: %s", e.Type, raw)
		}
	}
}

func mustMarshal(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
