package background

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/offload-dev/offload/pkg/telemetry"
	"github.com/offload-dev/offload/pkg/tool"
)

// resultSpan records the span of a background task's injected result
// (background_result NAME): from its outcome's arrival to its delivery to
// the model as a follow-up, a child of the span of the call that started
// it, so that the result's way back is in the call's trace. Nothing for an
// untraced run or an adopted task (its call was another run's).
func (br *bgRun) resultSpan(t *bgTask, err error) {
	if !t.span.IsValid() {
		return
	}
	ctx := trace.ContextWithSpanContext(context.Background(), t.span)
	start := t.doneAt
	if start.IsZero() {
		start = time.Now()
	}
	_, span := br.info.Tracer().Start(ctx, "background_result "+t.call.Call.ToolName, trace.WithTimestamp(start))
	if span.IsRecording() {
		span.SetAttributes(
			telemetry.GenAIToolName.String(t.call.Call.ToolName),
			telemetry.GenAIToolCallID.String(t.call.Call.ToolCallID),
			telemetry.GenAIConversationID.String(br.info.ConversationID),
			telemetry.OffloadTaskID.String(t.id))
		if t.err != nil {
			span.SetAttributes(telemetry.ErrorType.String(tool.ErrorType(t.err)))
		}
		if err != nil {
			span.SetStatus(codes.Error, err.Error())
		}
	}
	span.End()
}
