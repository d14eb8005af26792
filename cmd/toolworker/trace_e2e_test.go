package main

import (
	"bytes"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/offload-dev/offload/internal/otlprecv"
	"github.com/offload-dev/offload/internal/proctest"
	"github.com/offload-dev/offload/pkg/natsjs/natstest"
)

// TestOneTraceAcrossTheQueue runs toolworker and agent run exporting to an
// OTLP/HTTP receiver on loopback (SPEC §14): the agent's and the worker's
// spans share one trace, the worker's task span is a child of the
// dispatch's producer span, the model spans carry gen_ai.request.model and
// token usage, the tool spans gen_ai.tool.name.
func TestOneTraceAcrossTheQueue(t *testing.T) {
	t.Parallel()
	twBin, agentBin := binaries(t)
	recv, err := otlprecv.Start(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = recv.Close() })
	otel := []string{
		"OTEL_EXPORTER_OTLP_ENDPOINT=" + recv.Endpoint(),
		"OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf",
		"OTEL_BSP_SCHEDULE_DELAY=50", // the worker exports its spans soon after they end
	}
	srv := natstest.Start(t)
	dir := proctest.ToolDir(t)
	writeFile(t, filepath.Join(dir, "shout.sh"), shoutScript, 0o755)
	writeFile(t, filepath.Join(dir, "broken.sh"), brokenScript, 0o755)
	writeFile(t, filepath.Join(dir, "tools.yaml"), configYAML, 0o644)
	w := proctest.StartProcessEnv(t, otel, twBin, "--nats", srv.URL(), "--config", filepath.Join(dir, "tools.yaml"), "--id", "traced")
	w.WaitLog(t, `"msg":"toolworker started"`, 30*time.Second)

	cmd := exec.CommandContext(t.Context(), agentBin, "run", "--nats", srv.URL(), "--model", "test", "--tools", "shout", "--json", "shout a")
	cmd.Dir = dir
	cmd.Env = append(cmd.Environ(), otel...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("agent: %v\nstdout: %s\nstderr: %s", err, out, stderr.String())
	}

	// The agent exported its spans as it exited; the worker's arrive
	// within its batch delay.
	var spans []otlprecv.Span
	deadline := time.After(30 * time.Second)
	for {
		changed := recv.Changed()
		spans = recv.Spans()
		if has(spans, "toolworker", "process tools.task.shout") && has(spans, "agent", "invoke_agent") {
			break
		}
		select {
		case <-changed:
		case <-deadline:
			t.Fatalf("the receiver has no task span of the worker and run span of the agent; it has %s", names(spans))
		}
	}

	run := find(t, spans, "agent", "invoke_agent")
	for _, s := range spans {
		if s.TraceID != run.TraceID {
			t.Errorf("span %s of %s is in trace %s, not the run's %s", s.Name, s.Service, s.TraceID, run.TraceID)
		}
	}
	// Every --json event names the run's span.
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		var ev struct {
			Type    string
			TraceID string `json:"trace_id"`
			SpanID  string `json:"span_id"`
		}
		if err := json.Unmarshal([]byte(line), &ev); err != nil {
			t.Fatal(err)
		}
		if ev.TraceID != run.TraceID || ev.SpanID != run.SpanID {
			t.Errorf("event %s: trace_id %q span_id %q, want the run's %s %s", ev.Type, ev.TraceID, ev.SpanID, run.TraceID, run.SpanID)
		}
	}
	model := find(t, spans, "agent", "chat test")
	if model.Kind != "SPAN_KIND_CLIENT" || model.Attrs["gen_ai.operation.name"] != "chat" || model.Attrs["gen_ai.request.model"] != "test" {
		t.Errorf("model span = %+v", model)
	}
	if in, ok := model.Attrs["gen_ai.usage.input_tokens"].(int64); !ok || in <= 0 {
		t.Errorf("model span's gen_ai.usage.input_tokens = %v", model.Attrs["gen_ai.usage.input_tokens"])
	}
	if _, ok := model.Attrs["gen_ai.usage.output_tokens"].(int64); !ok {
		t.Errorf("model span has no gen_ai.usage.output_tokens: %v", model.Attrs)
	}
	if model.ParentSpanID != run.SpanID {
		t.Errorf("model span's parent = %s, want the run's %s", model.ParentSpanID, run.SpanID)
	}
	call := find(t, spans, "agent", "execute_tool shout")
	if call.Attrs["gen_ai.tool.name"] != "shout" || call.Attrs["gen_ai.tool.call.id"] == "" || call.ParentSpanID != run.SpanID {
		t.Errorf("agent's tool span = %+v (parent want %s)", call, run.SpanID)
	}
	send := find(t, spans, "agent", "send tools.task.shout")
	if send.Kind != "SPAN_KIND_PRODUCER" || send.Attrs["messaging.system"] != "nats" ||
		send.Attrs["messaging.destination.name"] != "tools.task.shout" || send.ParentSpanID != call.SpanID {
		t.Errorf("dispatch span = %+v (parent want the tool call's %s)", send, call.SpanID)
	}
	task := find(t, spans, "toolworker", "process tools.task.shout")
	if task.Kind != "SPAN_KIND_CONSUMER" || task.ParentSpanID != send.SpanID || task.Attrs["messaging.system"] != "nats" {
		t.Errorf("worker's task span = %+v, want a consumer span child of the dispatch %s", task, send.SpanID)
	}
	if task.Attrs["offload.result.status"] != "ok" {
		t.Errorf("worker's task span's status = %v", task.Attrs["offload.result.status"])
	}
	tool := find(t, spans, "toolworker", "execute_tool shout")
	if tool.Attrs["gen_ai.tool.name"] != "shout" || tool.ParentSpanID != task.SpanID {
		t.Errorf("worker's tool span = %+v (parent want the task's %s)", tool, task.SpanID)
	}
}

// has reports whether spans hold a span of service named name.
func has(spans []otlprecv.Span, service, name string) bool {
	return slices.ContainsFunc(spans, func(s otlprecv.Span) bool { return s.Service == service && s.Name == name })
}

// find returns the span of service named name.
func find(t *testing.T, spans []otlprecv.Span, service, name string) otlprecv.Span {
	t.Helper()
	i := slices.IndexFunc(spans, func(s otlprecv.Span) bool { return s.Service == service && s.Name == name })
	if i < 0 {
		t.Fatalf("no span %q of %s among %s", name, service, names(spans))
	}
	return spans[i]
}

// names lists the spans as service/name.
func names(spans []otlprecv.Span) string {
	out := make([]string, len(spans))
	for i, s := range spans {
		out[i] = s.Service + "/" + s.Name
	}
	return strings.Join(out, ", ")
}
