package main

import (
	"context"

	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/offload-dev/offload/pkg/conversation"
	"github.com/offload-dev/offload/pkg/telemetry"
)

// startPublishSpan starts the producer span of a decision or an answer
// published by hand (agent approve, deny, answer) when the command is
// traced: the message carries its trace context, to which the run's
// approval span links (SPEC §14).
func startPublishSpan(ctx context.Context, e env, kind conversation.ArrivalKind, conv, task string) (context.Context, trace.Span) {
	ctx, span := telemetry.Tracer(e.tracer).Start(ctx, "send "+string(kind), trace.WithSpanKind(trace.SpanKindProducer))
	if span.IsRecording() {
		span.SetAttributes(
			telemetry.MessagingSystem.String(telemetry.MessagingSystemNATS),
			telemetry.MessagingOperationType.String("send"),
			telemetry.GenAIConversationID.String(conv),
			telemetry.OffloadTaskID.String(task))
	}
	return ctx, span
}

// endPublishSpan ends the span, with err as its error.
func endPublishSpan(span trace.Span, err error) {
	if err != nil && span.IsRecording() {
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}
