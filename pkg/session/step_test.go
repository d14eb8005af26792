package session_test

import (
	"context"
	"encoding/json"
	"sync/atomic"
	"testing"

	"github.com/offload-dev/offload/pkg/agent"
	"github.com/offload-dev/offload/pkg/conversation"
	"github.com/offload-dev/offload/pkg/deferred"
	"github.com/offload-dev/offload/pkg/llm/testmodel"
	"github.com/offload-dev/offload/pkg/message"
	"github.com/offload-dev/offload/pkg/session"
	"github.com/offload-dev/offload/pkg/tool"
)

// A process that continued a paused conversation stored the outcome of an
// approved call while the step's other calls ran, and died (SPEC §20):
// the next continuation does not hand that call its decision again (it
// ran: its outcome is in the history), so it is not run twice; the
// other answered call gets its answer.
func TestPrepareSkipsACallItsStepStored(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := conversation.NewMemory()
	rec := &recorder{}
	id, pending := pausedConversation(t, store, rec)
	appr, ext := taskOf(t, pending, deferred.KindApproval), taskOf(t, pending, deferred.KindExternal)

	// What the dead process stored: deploy's outcome after the response.
	st, rev, err := store.Load(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	st.History = append(st.History, message.NewRequest(message.ToolReturn{ToolName: "deploy", ToolCallID: appr.ToolCallID,
		Content: json.RawMessage(`"deployed prod"`)}))
	if _, err := store.Save(ctx, st, rev); err != nil {
		t.Fatal(err)
	}

	s, err := session.Open(ctx, session.Config{Store: store, Announcer: rec, Canceller: rec}, id, false)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Admit(conversation.ArrivalDecision, appr.TaskID, []byte(`{"approved":true,"by":"ann"}`)); err != nil {
		t.Fatal(err)
	}
	if err := s.Admit(conversation.ArrivalAnswer, ext.TaskID, []byte(`{"content":"42"}`)); err != nil {
		t.Fatal(err)
	}
	opts, err := s.Prepare("")
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := opts.DeferredResults.Approvals[appr.ToolCallID]; ok {
		t.Fatalf("deploy, whose outcome is stored, handed its decision again: %+v", opts.DeferredResults)
	}
	if _, ok := opts.DeferredResults.Calls[ext.ToolCallID]; !ok {
		t.Fatalf("ask's answer missing: %+v", opts.DeferredResults)
	}

	var deploys atomic.Int32
	deploy := tool.Func("deploy", "Deploy.", func(_ context.Context, _ *tool.RunContext, a deployArgs) (string, error) {
		deploys.Add(1)
		return "deployed " + a.Target, nil
	}, tool.NeedsApproval())
	ext2, _ := tool.External(tool.Def{Name: "ask", Description: "Ask.", Parameters: json.RawMessage(`{"type":"object"}`)})
	fns, _ := tool.NewSet(deploy)
	a, err := agent.New(agent.Config{Model: testmodel.New(testmodel.Config{CallTools: []string{}}), Toolsets: []tool.Toolset{fns, ext2}, AllowDeferred: true})
	if err != nil {
		t.Fatal(err)
	}
	opts.Capabilities = []agent.Capability{s.Checkpointer()}
	res, err := a.Run(ctx, "", opts)
	if err != nil || res.Paused() {
		t.Fatalf("continued run: %v, paused %v", err, res != nil && res.Paused())
	}
	if n := deploys.Load(); n != 0 {
		t.Errorf("deploy ran %d times in the continuation, want 0: its outcome was stored", n)
	}
}
