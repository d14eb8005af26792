package agent

// This file holds the run's spans (SPEC §14): the run, its model requests
// and its tool calls, with the GenAI semantic conventions' attributes. The
// attributes are built only when a span records: with no TracerProvider
// the spans are the no-op tracer's.

import (
	"context"
	"errors"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/offload-dev/offload/pkg/llm"
	"github.com/offload-dev/offload/pkg/telemetry"
	"github.com/offload-dev/offload/pkg/tool"
)

// startRunSpan starts the run's span (invoke_agent), linked to the run it
// continues; a recording one names the run's events and logs (trace_id,
// span_id).
func (r *run) startRunSpan(ctx context.Context) (context.Context, trace.Span) {
	opts := []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindInternal)}
	if r.opts.Continues.IsValid() {
		opts = append(opts, trace.WithLinks(trace.Link{SpanContext: r.opts.Continues,
			Attributes: []attribute.KeyValue{telemetry.OffloadLink.String(telemetry.LinkContinues)}}))
	}
	ctx, span := r.a.tracer.Start(ctx, telemetry.OpInvokeAgent, opts...)
	if span.IsRecording() {
		span.SetAttributes(
			telemetry.GenAIOperationName.String(telemetry.OpInvokeAgent),
			telemetry.GenAIConversationID.String(r.convID),
			telemetry.OffloadRunID.String(r.runID))
		sc := span.SpanContext()
		r.traceID, r.spanID = sc.TraceID().String(), sc.SpanID().String()
	}
	return ctx, span
}

// endRunSpan ends the run's span with its status.
func endRunSpan(span trace.Span, final *Final) {
	if span.IsRecording() {
		span.SetAttributes(telemetry.OffloadStatus.String(string(final.Status)))
		if final.Status == StatusFailed || final.Status == StatusInterrupted {
			span.SetStatus(codes.Error, final.Error)
		}
	}
	span.End()
}

// startModelSpan starts a model request's span (chat MODEL, a client span).
func (r *run) startModelSpan(ctx context.Context, model string) (context.Context, trace.Span) {
	ctx, span := r.a.tracer.Start(ctx, telemetry.OpChat+" "+model, trace.WithSpanKind(trace.SpanKindClient))
	if span.IsRecording() {
		span.SetAttributes(
			telemetry.GenAIOperationName.String(telemetry.OpChat),
			telemetry.GenAIRequestModel.String(model),
			telemetry.GenAIConversationID.String(r.convID))
	}
	return ctx, span
}

// endModelSpan ends a model request's span with the response's model and
// token usage, or its error.
func endModelSpan(span trace.Span, resp *llm.Response, err error) {
	if span.IsRecording() {
		if err != nil {
			span.SetStatus(codes.Error, err.Error())
			span.SetAttributes(telemetry.ErrorType.String(tool.ErrorType(err)))
		} else if resp != nil {
			span.SetAttributes(
				telemetry.GenAIUsageInputTokens.Int(resp.Usage.InputTokens),
				telemetry.GenAIUsageOutputTokens.Int(resp.Usage.OutputTokens))
			if resp.ModelName != "" {
				span.SetAttributes(telemetry.GenAIResponseModel.String(resp.ModelName))
			}
			if resp.FinishReason != "" {
				span.SetAttributes(telemetry.GenAIResponseFinish.StringSlice([]string{resp.FinishReason}))
			}
		}
	}
	span.End()
}

// startToolSpan starts a tool call's span (execute_tool NAME): a remote
// tool's dispatch and the worker's task are its children.
func (r *run) startToolSpan(ctx context.Context, s *slot) (context.Context, trace.Span) {
	ctx, span := r.a.tracer.Start(ctx, telemetry.OpExecuteTool+" "+s.call.ToolName, trace.WithSpanKind(trace.SpanKindInternal))
	if span.IsRecording() {
		span.SetAttributes(
			telemetry.GenAIOperationName.String(telemetry.OpExecuteTool),
			telemetry.GenAIToolName.String(s.call.ToolName),
			telemetry.GenAIToolCallID.String(s.call.ToolCallID),
			telemetry.GenAIConversationID.String(r.convID))
	}
	return ctx, span
}

// endToolSpan ends a tool call's span: an error is the span's, except a
// deferral (an approval required, a call deferred), which is an outcome.
func endToolSpan(span trace.Span, err error) {
	if span.IsRecording() && err != nil {
		var ar *tool.ApprovalRequired
		var cd *tool.CallDeferred
		if errors.As(err, &ar) || errors.As(err, &cd) {
			span.SetAttributes(telemetry.OffloadStatus.String("deferred"))
		} else {
			span.SetStatus(codes.Error, err.Error())
			span.SetAttributes(telemetry.ErrorType.String(tool.ErrorType(err)))
		}
	}
	span.End()
}
