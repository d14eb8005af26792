package remote_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/offload-dev/offload/internal/offloadtest"
	"github.com/offload-dev/offload/pkg/natsjs/internal/jstest"
	"github.com/offload-dev/offload/pkg/natsjs/remote"
	"github.com/offload-dev/offload/pkg/natsjs/worker"
	"github.com/offload-dev/offload/pkg/protocol"
	"github.com/offload-dev/offload/pkg/telemetry"
	"github.com/offload-dev/offload/pkg/tool"
)

// lineOf returns the first JSON log line of out whose msg is msg.
func lineOf(t *testing.T, out, msg string) map[string]any {
	t.Helper()
	for _, l := range strings.Split(out, "\n") {
		var rec map[string]any
		if json.Unmarshal([]byte(l), &rec) == nil && rec["msg"] == msg {
			return rec
		}
	}
	t.Fatalf("no log line %q in:\n%s", msg, out)
	return nil
}

// TestDispatchAndTaskLogLinesShareTheTrace: the agent's log line of a
// dispatch ("task dispatched", logged with the dispatch span's context
// through telemetry.LogHandler, as the binaries log) and the worker's log
// line of the task ("task started") carry the same trace_id, the
// dispatch's trace (SPEC §14).
func TestDispatchAndTaskLogLinesShareTheTrace(t *testing.T) {
	t.Parallel()
	b := setup(t)
	tp := sdktrace.NewTracerProvider()
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	debug := &slog.HandlerOptions{Level: slog.LevelDebug}
	var agentLog, workerLog offloadtest.Output
	b.worker(t, worker.Config{Tools: []*tool.Tool{jstest.EchoTool("")}, TracerProvider: tp,
		Logger: slog.New(telemetry.LogHandler(slog.NewJSONHandler(&workerLog, debug)))})
	d, _ := b.dispatcher(t, remote.DispatcherConfig{TracerProvider: tp,
		Logger: slog.New(telemetry.LogHandler(slog.NewJSONHandler(&agentLog, debug)))})

	ctx, call := tp.Tracer("test").Start(context.Background(), "tool call")
	task := jstest.NewTask("echo", protocol.NewID(), `{"text":"a"}`)
	res, err := d.Call(ctx, task)
	call.End()
	if err != nil || jstest.Content(t, res) != "a" {
		t.Fatalf("call = %+v, %v", res, err)
	}
	dispatched := lineOf(t, agentLog.String(), "task dispatched")
	started := lineOf(t, workerLog.String(), "task started")
	want := call.SpanContext().TraceID().String()
	if dispatched["trace_id"] != want || started["trace_id"] != want {
		t.Fatalf("trace_id %v on the dispatch's line, %v on the task's, want both %s", dispatched["trace_id"], started["trace_id"], want)
	}
	if dispatched["task_id"] != task.TaskID || started["task_id"] != task.TaskID || dispatched["span_id"] == call.SpanContext().SpanID().String() {
		t.Fatalf("lines %v and %v: want the task's ID, and the dispatch's own span on its line", dispatched, started)
	}
}
