package remote

import (
	"context"
	"sync"
	"sync/atomic"

	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/offload-dev/offload/pkg/protocol"
	"github.com/offload-dev/offload/pkg/telemetry"
)

// startDispatchSpan starts the producer span of a task's dispatch (SPEC
// §14): its trace context goes into the task's headers (and its
// traceparent field), so that the worker's task span is its child.
func (d *Dispatcher) startDispatchSpan(ctx context.Context, names taskNames, task protocol.Task) (context.Context, trace.Span) {
	subject := names.subject
	ctx, span := d.tracer.Start(ctx, names.span, trace.WithSpanKind(trace.SpanKindProducer))
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

// taskNames are a tool's task subject and its dispatch span's name,
// made once per tool rather than on every dispatch (two allocations a
// call, traced or not).
type taskNames struct{ subject, span string }

// maxTaskNames bounds the tools whose names a dispatcher keeps; a
// dispatch of another tool makes its names on each call.
const maxTaskNames = 1024

// nameCache holds the taskNames of the tools dispatched to.
type nameCache struct {
	m sync.Map // tool name → taskNames
	n atomic.Int32
}

// taskNames returns toolName's names.
func (d *Dispatcher) taskNames(toolName string) taskNames {
	if n, ok := d.names.m.Load(toolName); ok {
		return n.(taskNames) //nolint:forcetypeassert // only taskNames are stored
	}
	subject := d.subj.Task(toolName)
	n := taskNames{subject: subject, span: "send " + subject}
	if d.names.n.Add(1) <= maxTaskNames {
		d.names.m.Store(toolName, n)
	}
	return n
}
