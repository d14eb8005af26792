package remote_test

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/offload-dev/offload/internal/offloadtest"
	"github.com/offload-dev/offload/pkg/natsjs/internal/jstest"
	"github.com/offload-dev/offload/pkg/natsjs/remote"
	"github.com/offload-dev/offload/pkg/natsjs/worker"
	"github.com/offload-dev/offload/pkg/protocol"
	"github.com/offload-dev/offload/pkg/telemetry"
	"github.com/offload-dev/offload/pkg/tool"
)

// TestTraceContextCrossesTheQueue: with a TracerProvider, a task carries
// the dispatch's producer span in its traceparent header, the worker's
// consumer span is that span's child, its tool span the task span's, and
// the result carries the task span's trace context (SPEC §14).
func TestTraceContextCrossesTheQueue(t *testing.T) {
	t.Parallel()
	b := setup(t)
	rec := tracetest.NewSpanRecorder()
	taskEnded := &endSignal{name: "process tools.task.echo", ch: make(chan struct{})}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec), sdktrace.WithSpanProcessor(taskEnded))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	tasks, err := b.nc.SubscribeSync("tools.task.>")
	if err != nil {
		t.Fatal(err)
	}
	results, err := b.nc.SubscribeSync("tools.result.>")
	if err != nil {
		t.Fatal(err)
	}
	var logs offloadtest.Output
	b.worker(t, worker.Config{Tools: []*tool.Tool{jstest.EchoTool("")}, TracerProvider: tp,
		Logger: slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	d, _ := b.dispatcher(t, remote.DispatcherConfig{TracerProvider: tp})

	ctx, parent := tp.Tracer("test").Start(context.Background(), "tool call")
	res, err := d.Call(ctx, jstest.NewTask("echo", protocol.NewID(), `{"text":"a"}`))
	parent.End()
	if err != nil || jstest.Content(t, res) != "a" {
		t.Fatalf("call = %+v, %v", res, err)
	}
	taskMsg, err := tasks.NextMsg(wait)
	if err != nil {
		t.Fatal(err)
	}
	resMsg, err := results.NextMsg(wait)
	if err != nil {
		t.Fatal(err)
	}

	// The worker ends its task span once the delivery is acked, after
	// the result went out.
	offloadtest.WaitOrTimeout(t, taskEnded.ch, "the worker's task span to end")
	spans := map[string]sdktrace.ReadOnlySpan{}
	for _, s := range rec.Ended() {
		spans[s.Name()] = s
	}
	send, task, tool := spans["send tools.task.echo"], spans["process tools.task.echo"], spans["execute_tool echo"]
	if send == nil || task == nil || tool == nil {
		t.Fatalf("spans ended: %v", spans)
	}
	if send.SpanKind() != trace.SpanKindProducer || send.Parent().SpanID() != parent.SpanContext().SpanID() {
		t.Errorf("dispatch span: kind %v, parent %v, want a producer child of %v", send.SpanKind(), send.Parent().SpanID(), parent.SpanContext().SpanID())
	}
	if got := telemetry.SpanContextOf(taskMsg.Header); got.SpanID() != send.SpanContext().SpanID() || got.TraceID() != parent.SpanContext().TraceID() {
		t.Errorf("task's traceparent %q, want the dispatch span %v", taskMsg.Header.Get(telemetry.TraceparentHeader), send.SpanContext().SpanID())
	}
	if pt, err := protocol.DecodeTask(taskMsg.Data, nil); err != nil || pt.Traceparent != taskMsg.Header.Get(telemetry.TraceparentHeader) {
		t.Errorf("task's traceparent field %q (%v), want the header's", pt.Traceparent, err)
	}
	if task.SpanKind() != trace.SpanKindConsumer || task.Parent().SpanID() != send.SpanContext().SpanID() || !task.Parent().IsRemote() {
		t.Errorf("task span: kind %v, parent %v (remote %v), want a consumer child of the dispatch %v",
			task.SpanKind(), task.Parent().SpanID(), task.Parent().IsRemote(), send.SpanContext().SpanID())
	}
	// The task span carries the messaging attributes and the worker, not
	// the IDs its parent (the dispatch) and its child (the tool) carry.
	var keys []string
	for _, kv := range task.Attributes() {
		keys = append(keys, string(kv.Key))
	}
	slices.Sort(keys)
	if want := []string{"messaging.destination.name", "messaging.message.id", "messaging.operation.name", "messaging.operation.type",
		"messaging.system", "offload.result.status", "offload.worker"}; !slices.Equal(keys, want) {
		t.Errorf("task span's attributes %v, want %v", keys, want)
	}
	if tool.Parent().SpanID() != task.SpanContext().SpanID() {
		t.Errorf("tool span's parent %v, want the task's %v", tool.Parent().SpanID(), task.SpanContext().SpanID())
	}
	// The task's log lines name its span.
	if want := fmt.Sprintf(`"trace_id":"%s","span_id":"%s"`, task.SpanContext().TraceID(), task.SpanContext().SpanID()); !strings.Contains(logs.String(), want) {
		t.Errorf("the worker's task logs lack %s:\n%s", want, logs.String())
	}
	if got := telemetry.SpanContextOf(resMsg.Header); got.SpanID() != task.SpanContext().SpanID() {
		t.Errorf("result's traceparent %q, want the task span %v", resMsg.Header.Get(telemetry.TraceparentHeader), task.SpanContext().SpanID())
	}
}

// TestNoTracerProviderNoTraceHeaders: without a TracerProvider no task or
// result carries trace headers.
func TestNoTracerProviderNoTraceHeaders(t *testing.T) {
	t.Parallel()
	b := setup(t)
	tasks, err := b.nc.SubscribeSync("tools.task.>")
	if err != nil {
		t.Fatal(err)
	}
	results, err := b.nc.SubscribeSync("tools.result.>")
	if err != nil {
		t.Fatal(err)
	}
	b.worker(t, worker.Config{Tools: []*tool.Tool{jstest.EchoTool("")}})
	d, _ := b.dispatcher(t, remote.DispatcherConfig{})
	task := jstest.NewTask("echo", protocol.NewID(), `{"text":"a"}`)
	if _, err := d.Call(context.Background(), task); err != nil {
		t.Fatal(err)
	}
	for _, sub := range []string{"task", "result"} {
		s := tasks
		if sub == "result" {
			s = results
		}
		m, err := s.NextMsg(wait)
		if err != nil {
			t.Fatal(err)
		}
		if v := m.Header.Get(telemetry.TraceparentHeader); v != "" {
			t.Errorf("%s carries traceparent %q without a TracerProvider", sub, v)
		}
	}
}

// endSignal is a span processor that closes ch when the span named name
// ends.
type endSignal struct {
	name string
	once sync.Once
	ch   chan struct{}
}

func (e *endSignal) OnStart(context.Context, sdktrace.ReadWriteSpan) {}
func (e *endSignal) OnEnd(s sdktrace.ReadOnlySpan) {
	if s.Name() == e.name {
		e.once.Do(func() { close(e.ch) })
	}
}
func (e *endSignal) Shutdown(context.Context) error   { return nil }
func (e *endSignal) ForceFlush(context.Context) error { return nil }

// TestTaskTraceparentFieldWithoutHeader: a task published without trace
// headers but with SPEC §5.2's traceparent field (a third-party agent's)
// is processed in a span whose parent is that field's.
func TestTaskTraceparentFieldWithoutHeader(t *testing.T) {
	t.Parallel()
	b := setup(t)
	rec := tracetest.NewSpanRecorder()
	taskEnded := &endSignal{name: "process tools.task.echo", ch: make(chan struct{})}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec), sdktrace.WithSpanProcessor(taskEnded))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	b.worker(t, worker.Config{Tools: []*tool.Tool{jstest.EchoTool("")}, TracerProvider: tp})
	task := jstest.NewTask("echo", protocol.NewID(), `{"text":"a"}`)
	task.Traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	data, err := protocol.AppendTask(nil, &task)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.js.Publish(t.Context(), "tools.task.echo", data); err != nil {
		t.Fatal(err)
	}
	offloadtest.WaitOrTimeout(t, taskEnded.ch, "the worker's task span to end")
	for _, s := range rec.Ended() {
		if s.Name() == "process tools.task.echo" {
			if s.Parent().TraceID().String() != "4bf92f3577b34da6a3ce929d0e0e4736" || s.Parent().SpanID().String() != "00f067aa0ba902b7" {
				t.Errorf("task span's parent %v/%v, want the field's", s.Parent().TraceID(), s.Parent().SpanID())
			}
		}
	}
}
