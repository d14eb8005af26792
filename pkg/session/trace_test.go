package session_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/offload-dev/offload/pkg/agent"
	"github.com/offload-dev/offload/pkg/conversation"
	"github.com/offload-dev/offload/pkg/deferred"
	"github.com/offload-dev/offload/pkg/llm/testmodel"
	"github.com/offload-dev/offload/pkg/protocol"
	"github.com/offload-dev/offload/pkg/session"
	"github.com/offload-dev/offload/pkg/tool"
)

// TestContinuationLinksToTheRunItContinues: a traced run that pauses keeps
// its span's trace context in the stored state, and the run continuing
// the conversation (in another session, as a later process would) links
// its span to it; the approval decided meanwhile is a span of the paused
// run's trace (SPEC §14).
func TestContinuationLinksToTheRunItContinues(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	deploy := tool.Func("deploy", "Deploy.", func(_ context.Context, _ *tool.RunContext, a deployArgs) (string, error) {
		return "deployed " + a.Target, nil
	}, tool.NeedsApproval())
	fns, err := tool.NewSet(deploy)
	if err != nil {
		t.Fatal(err)
	}
	newAgent := func(calls []string) *agent.Agent {
		a, err := agent.New(agent.Config{Model: testmodel.New(testmodel.Config{CallTools: calls}), Toolsets: []tool.Toolset{fns},
			AllowDeferred: true, TracerProvider: tp})
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	store := conversation.NewMemory()
	id := protocol.NewID()
	s1, err := session.Open(ctx, session.Config{Store: store, TracerProvider: tp}, id, true)
	if err != nil {
		t.Fatal(err)
	}
	res, err := s1.Run(ctx, newAgent(nil), "go", nil)
	s1.Close()
	if err != nil || !res.Paused() {
		t.Fatalf("first run: %v, paused %v", err, res != nil && res.Paused())
	}
	first := rec.Ended()[len(rec.Ended())-1]
	if first.Name() != "invoke_agent" || len(first.Links()) != 0 {
		t.Fatalf("first run's span %s with %d links", first.Name(), len(first.Links()))
	}

	s2, err := session.Open(ctx, session.Config{Store: store, TracerProvider: tp}, id, false)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	appr := taskOf(t, res.PendingRecord(), deferred.KindApproval)
	if err := s2.Admit(conversation.ArrivalDecision, appr.TaskID, json.RawMessage(`{"approved":true}`)); err != nil {
		t.Fatal(err)
	}
	opts, err := s2.Prepare("")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s2.Run(ctx, newAgent([]string{}), "", opts); err != nil {
		t.Fatal(err)
	}
	second := rec.Ended()[len(rec.Ended())-1]
	if second.Name() != "invoke_agent" || second.SpanContext().SpanID() == first.SpanContext().SpanID() {
		t.Fatalf("second run's span: %s", second.Name())
	}
	// The decision taken during the pause is a span of the paused run's
	// trace, from the call's deferral to the decision.
	var ap sdktrace.ReadOnlySpan
	for _, sp := range rec.Ended() {
		if sp.Name() == "approval deploy" {
			ap = sp
		}
	}
	if ap == nil {
		t.Fatal("no approval span")
	}
	if ap.Parent().SpanID() != first.SpanContext().SpanID() || ap.SpanContext().TraceID() != first.SpanContext().TraceID() ||
		!ap.StartTime().Before(ap.EndTime()) || ap.StartTime().Before(first.StartTime().Add(-time.Millisecond)) {
		t.Errorf("approval span: parent %v (want the paused run's %v), %v → %v", ap.Parent().SpanID(), first.SpanContext().SpanID(), ap.StartTime(), ap.EndTime())
	}
	links := second.Links()
	if len(links) != 1 || links[0].SpanContext.SpanID() != first.SpanContext().SpanID() || links[0].SpanContext.TraceID() != first.SpanContext().TraceID() {
		t.Errorf("the continuation's links %+v, want the first run's span %v", links, first.SpanContext().SpanID())
	}
}
