package session

import (
	"context"
	"encoding/json"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/offload-dev/offload/pkg/conversation"
	"github.com/offload-dev/offload/pkg/deferred"
	"github.com/offload-dev/offload/pkg/protocol"
	"github.com/offload-dev/offload/pkg/telemetry"
)

// Outcomes of an approval span (offload.approval.outcome).
const (
	outcomeApproved = "approved"
	outcomeDenied   = "denied"
)

// approvalSpan records the span of an approval decided while the run
// waited (SPEC §14): from its announcement to the decision's arrival (the
// time the server stored it), in the run's trace (ctx), with the decider
// (the decision's by) and the outcome, linked to the trace the decision
// carried, if any.
func (s *Session) approvalSpan(ctx context.Context, t deferred.PendingTask, a conversation.Arrival, announced time.Time) {
	if a.Kind != conversation.ArrivalDecision {
		return
	}
	opts := []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindInternal), trace.WithTimestamp(announced)}
	if sc := telemetry.ParseTraceparent(a.Trace); sc.IsValid() {
		// The decider's trace (agent approve traced, a UI's, a nats pub -H).
		opts = append(opts, trace.WithLinks(trace.Link{SpanContext: sc,
			Attributes: []attribute.KeyValue{telemetry.OffloadLink.String(telemetry.LinkDecision)}}))
	}
	_, span := s.tracer.Start(ctx, "approval "+t.Tool, opts...)
	if !span.IsRecording() {
		span.End()
		return
	}
	var d protocol.Decision
	_ = json.Unmarshal(a.Data, &d) // admitted: it decodes
	outcome := outcomeDenied
	if d.Approved {
		outcome = outcomeApproved
	}
	span.SetAttributes(
		telemetry.GenAIToolName.String(t.Tool),
		telemetry.GenAIToolCallID.String(t.ToolCallID),
		telemetry.GenAIConversationID.String(s.st.ID),
		telemetry.OffloadTaskID.String(t.TaskID),
		telemetry.OffloadApprovalBy.String(d.By),
		telemetry.OffloadApprovalOutcome.String(outcome))
	end := a.At
	if end.Before(announced) {
		end = announced // decided before this wait announced it (a decision stored early)
	}
	span.End(trace.WithTimestamp(end))
}

// pausedApprovalSpan records the span of an approval decided while its
// run was paused, as the conversation is continued: a child of the span of
// the run that paused (the stored state's trace), from the call's deferral
// (its task ID's time, when the approval was announced) to the decision's
// stored time. Nothing when that run was not traced.
func (s *Session) pausedApprovalSpan(t deferred.PendingTask, a conversation.Arrival) {
	parent := telemetry.ParseTraceparent(s.st.Trace)
	if a.Kind != conversation.ArrivalDecision || !parent.IsValid() {
		return
	}
	id, err := protocol.ParseID(t.TaskID)
	if err != nil {
		return
	}
	s.approvalSpan(trace.ContextWithRemoteSpanContext(context.Background(), parent), t, a, id.Timestamp())
}
