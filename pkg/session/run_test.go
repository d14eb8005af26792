package session_test

import (
	"context"
	"errors"
	"testing"

	"github.com/offload-dev/offload/pkg/agent"
	"github.com/offload-dev/offload/pkg/conversation"
	"github.com/offload-dev/offload/pkg/deferred"
	"github.com/offload-dev/offload/pkg/llm/testmodel"
	"github.com/offload-dev/offload/pkg/protocol"
	"github.com/offload-dev/offload/pkg/session"
	"github.com/offload-dev/offload/pkg/tool"
)

// Continue admits the answers given by hand after what arrived: a bad task
// ID or an unknown task is a GivenError naming the answer (those before it
// stay recorded), a second answer for a task is a duplicate, ignored; while
// a call waits it is a PendingError; once all are answered it returns the
// run's options, and Run continues the conversation and saves what it
// left.
func TestContinueAndRun(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := conversation.NewMemory()
	rec := &recorder{}
	id, pending := pausedConversation(t, store, rec)
	appr, ext := taskOf(t, pending, deferred.KindApproval), taskOf(t, pending, deferred.KindExternal)
	s, err := session.Open(ctx, session.Config{Store: store, Announcer: rec, Canceller: rec}, id, false)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	approve := session.Given{Kind: conversation.ArrivalDecision, TaskID: appr.TaskID, Data: []byte(`{"approved":true}`)}
	var ge *session.GivenError
	_, err = s.Continue(ctx, session.ContinueOptions{Given: []session.Given{approve, {Kind: conversation.ArrivalAnswer, TaskID: "nope", Data: []byte(`{}`)}}})
	if !errors.As(err, &ge) || ge.Index != 1 || !errors.Is(err, protocol.ErrInvalidID) {
		t.Fatalf("a bad task ID: %v", err)
	}
	_, err = s.Continue(ctx, session.ContinueOptions{Given: []session.Given{{Kind: conversation.ArrivalAnswer, TaskID: protocol.NewID(), Data: []byte(`{}`)}}})
	var re *conversation.RefusedError
	if !errors.As(err, &ge) || ge.Index != 0 || !errors.As(err, &re) || re.Reason != conversation.ReasonUnknownTask {
		t.Fatalf("an unknown task: %v", err)
	}
	dups := 0
	_, err = s.Continue(ctx, session.ContinueOptions{Given: []session.Given{approve},
		OnDuplicate: func(int, session.Given, *conversation.RefusedError) { dups++ }})
	var pe *session.PendingError
	if !errors.As(err, &pe) || len(pe.Waiting) != 1 || pe.Waiting[0].TaskID != ext.TaskID || dups != 1 {
		t.Fatalf("the external call still waits: %v, %d duplicates", err, dups)
	}
	opts, err := s.Continue(ctx, session.ContinueOptions{Given: []session.Given{{Kind: conversation.ArrivalAnswer, TaskID: ext.TaskID, Data: []byte(`{"content":"42"}`)}}})
	if err != nil || opts.DeferredResults == nil {
		t.Fatalf("continue: %+v, %v", opts, err)
	}
	deploy := tool.Func("deploy", "Deploy.", func(context.Context, *tool.RunContext, deployArgs) (string, error) { return "deployed", nil }, tool.NeedsApproval())
	fns, err := tool.NewSet(deploy)
	if err != nil {
		t.Fatal(err)
	}
	a, err := agent.New(agent.Config{Model: testmodel.New(testmodel.Config{}), Toolsets: []tool.Toolset{fns}, AllowDeferred: true})
	if err != nil {
		t.Fatal(err)
	}
	res, err := s.Run(ctx, a, "", opts)
	if err != nil || res.ConversationID != id {
		t.Fatalf("run: %+v, %v", res, err)
	}
	st, _, err := store.Load(ctx, id)
	if err != nil || len(st.History) != len(res.Messages) || len(st.Unresolved(deferred.KindApproval, deferred.KindExternal)) != 0 {
		t.Fatalf("stored %d messages (run %d), unresolved %+v, %v", len(st.History), len(res.Messages), st.Unresolved(), err)
	}
}
