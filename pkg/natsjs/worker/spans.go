package worker

import (
	"context"

	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/offload-dev/offload/pkg/protocol"
	"github.com/offload-dev/offload/pkg/telemetry"
	"github.com/offload-dev/offload/pkg/tool"
)

// startTaskSpan starts a delivered task's consumer span (SPEC §14): the
// child of the dispatch whose trace context the task's headers carry, or
// else its traceparent field (a new trace's root when neither does, as
// from a plain `nats pub`).
func (w *Worker) startTaskSpan(msg jetstream.Msg, task protocol.Task) (context.Context, trace.Span) {
	ctx := telemetry.Extract(w.runCtx, msg.Headers())
	if !trace.SpanContextFromContext(ctx).IsValid() && task.Traceparent != "" {
		// No header: the payload's field (SPEC §5.2), as a third-party
		// agent may set it.
		ctx = telemetry.Extract(w.runCtx, map[string][]string{telemetry.TraceparentHeader: {task.Traceparent}})
	}
	ctx, span := w.tracer.Start(ctx, w.taskSpanName(msg.Subject(), task.Tool), trace.WithSpanKind(trace.SpanKindConsumer))
	if span.IsRecording() {
		// The messaging attributes and the worker only: the task's IDs
		// (conversation, tool call, task, attempt) are its parent's, the
		// dispatch span's, and the tool's name and call its child's, the
		// tool span's. Every attribute is paid per span, in the span, its
		// export and the garbage of both (BENCHMARKS.md, tracing).
		span.SetAttributes(
			telemetry.MessagingSystem.String(telemetry.MessagingSystemNATS),
			telemetry.MessagingDestination.String(msg.Subject()),
			telemetry.MessagingOperationType.String("process"),
			telemetry.MessagingOperationName.String("process"),
			telemetry.MessagingMessageID.String(protocol.TaskMsgID(task.TaskID, task.Attempt)),
			telemetry.OffloadWorker.String(w.cfg.ID))
	}
	return ctx, span
}

// startToolSpan starts the span of the tool a task runs (execute_tool
// NAME), within the task's span.
func (w *Worker) startToolSpan(ctx context.Context, task protocol.Task) (context.Context, trace.Span) {
	ctx, span := w.tracer.Start(ctx, w.toolSpanName(task.Tool), trace.WithSpanKind(trace.SpanKindInternal))
	if span.IsRecording() {
		span.SetAttributes(
			telemetry.GenAIOperationName.String(telemetry.OpExecuteTool),
			telemetry.GenAIToolName.String(task.Tool),
			telemetry.GenAIToolCallID.String(task.ToolCallID),
			telemetry.GenAIConversationID.String(task.ConversationID))
	}
	return ctx, span
}

// endToolSpan ends a tool's span, with its error type when it failed.
func endToolSpan(span trace.Span, err error) {
	if err != nil && span.IsRecording() {
		span.SetStatus(codes.Error, err.Error())
		span.SetAttributes(telemetry.ErrorType.String(tool.ErrorType(err)))
	}
	span.End()
}

// spanNames are a served tool's task subject and the names of its task's
// and its tool's spans, made once at New rather than on every task (two
// allocations a task, traced or not).
type spanNames struct{ subject, process, execute string }

// spanExecute is the name of toolName's span.
func spanExecute(toolName string) string { return telemetry.OpExecuteTool + " " + toolName }

// taskSpanName returns the name of the span of a task of toolName
// delivered on subject: process SUBJECT.
func (w *Worker) taskSpanName(subject, toolName string) string {
	if p := w.partOf(toolName); p != nil && p.spans.subject == subject {
		return p.spans.process
	}
	return "process " + subject
}

// toolSpanName returns the name of toolName's span: execute_tool NAME.
func (w *Worker) toolSpanName(toolName string) string {
	if p := w.partOf(toolName); p != nil {
		return p.spans.execute
	}
	return spanExecute(toolName)
}
