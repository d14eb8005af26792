package remote

import (
	"context"

	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/offload-dev/offload/pkg/protocol"
	"github.com/offload-dev/offload/pkg/telemetry"
)

// startDispatchSpan starts the producer span of a task's dispatch (SPEC
// §14): its trace context goes into the task's headers (and its
// traceparent field), so that the worker's task span is its child.
func (d *Dispatcher) startDispatchSpan(ctx context.Context, subject string, task protocol.Task) (context.Context, trace.Span) {
	ctx, span := d.tracer.Start(ctx, "send "+subject, trace.WithSpanKind(trace.SpanKindProducer))
	if span.IsRecording() {
		span.SetAttributes(
			telemetry.MessagingSystem.String(telemetry.MessagingSystemNATS),
			telemetry.MessagingDestination.String(subject),
			telemetry.MessagingOperationType.String("send"),
			telemetry.MessagingOperationName.String("send"),
			telemetry.MessagingMessageID.String(protocol.TaskMsgID(task.TaskID, task.Attempt)),
			telemetry.MessagingConversationID.String(task.ConversationID),
			telemetry.GenAIToolName.String(task.Tool),
			telemetry.GenAIToolCallID.String(task.ToolCallID),
			telemetry.OffloadTaskID.String(task.TaskID),
			telemetry.OffloadTaskMode.String(string(task.Mode)),
			telemetry.OffloadAttempt.Int(task.Attempt))
	}
	return ctx, span
}

// spanError sets err, if any, as span's error status.
func spanError(span trace.Span, err error) {
	if err != nil && span.IsRecording() {
		span.SetStatus(codes.Error, err.Error())
	}
}
