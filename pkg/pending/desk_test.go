package pending_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/offload-dev/offload/pkg/conversation"
	"github.com/offload-dev/offload/pkg/deferred"
	"github.com/offload-dev/offload/pkg/message"
	"github.com/offload-dev/offload/pkg/natsjs"
	"github.com/offload-dev/offload/pkg/natsjs/convstore"
	"github.com/offload-dev/offload/pkg/natsjs/natstest"
	"github.com/offload-dev/offload/pkg/pending"
	"github.com/offload-dev/offload/pkg/protocol"
	"github.com/offload-dev/offload/pkg/tool"
)

// world is a store on a real server and a desk over its pending records.
type world struct {
	js    jetstream.JetStream
	store *convstore.Store
	desk  *pending.Desk
}

func newWorld(t *testing.T, cfg pending.Config) *world {
	t.Helper()
	srv := natstest.Start(t)
	js := srv.JetStream(t)
	ctx := t.Context()
	if err := natsjs.Provision(ctx, js, natsjs.ProvisionOptions{}); err != nil {
		t.Fatal(err)
	}
	store, err := convstore.New(ctx, convstore.Config{JetStream: js})
	if err != nil {
		t.Fatal(err)
	}
	recs, err := convstore.OpenPending(ctx, convstore.OpenConfig{JetStream: js})
	if err != nil {
		t.Fatal(err)
	}
	cfg.Records = recs
	d, err := pending.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &world{js: js, store: store, desk: d}
}

// approval is a pending approval of tool with args.
func approval(toolName, args string) deferred.PendingTask {
	return deferred.PendingTask{TaskID: protocol.NewID(), Kind: deferred.KindApproval, Tool: toolName, ToolCallID: "call_1", Args: json.RawMessage(args)}
}

// paused saves a new conversation of agent ops that waits for tasks.
func (w *world) paused(t *testing.T, tasks ...deferred.PendingTask) (*conversation.State, conversation.Revision) {
	t.Helper()
	id := protocol.NewID()
	st := &conversation.State{ID: id, Agent: &conversation.AgentRef{Name: "ops"},
		History: message.History{message.NewRequest(message.UserText("deploy it"))},
		Pending: &deferred.PendingRecord{ConversationID: id, RunID: protocol.NewID(), Tasks: tasks}}
	rev, err := w.store.Save(t.Context(), st, 0)
	if err != nil {
		t.Fatal(err)
	}
	return st, rev
}

type targetArgs struct {
	Target string `json:"target"`
}

func deployTool(t *testing.T) *tool.Tool {
	t.Helper()
	return tool.Func("deploy", "Deploy a target.", func(context.Context, *tool.RunContext, targetArgs) (string, error) { return "", nil })
}

// TestDeskCallsAndDecide: the calls waiting across conversations, with
// their agent, prompt and expiry; an edit checked against the tool's
// schema (refused in a person's words, nothing published), the decision
// bound to the arguments as pending and published once; a decision for
// a call no longer pending refused.
func TestDeskCallsAndDecide(t *testing.T) {
	t.Parallel()
	deploy := deployTool(t)
	w := newWorld(t, pending.Config{
		Tools: func(_ context.Context, agent, name string) (*tool.Tool, error) {
			if agent != "ops" || name != "deploy" {
				return nil, errors.New("unknown tool")
			}
			return deploy, nil
		},
		Timeouts: func(_ context.Context, _, name string) (pending.Timeout, bool) {
			return pending.Timeout{After: time.Hour, OnTimeout: "deny"}, name == "deploy"
		},
	})
	ctx := t.Context()
	st1, _ := w.paused(t, approval("deploy", `{"target":"a"}`))
	st2, _ := w.paused(t, approval("deploy", `{"target":"b"}`), deferred.PendingTask{TaskID: protocol.NewID(), Kind: deferred.KindExternal, Tool: "ask", Args: json.RawMessage(`{}`)})

	calls, err := w.desk.Calls(ctx, pending.Filter{Kinds: pending.ForPeople})
	if err != nil || len(calls) != 3 {
		t.Fatalf("Calls = %d calls, %v; want 3", len(calls), err)
	}
	for _, c := range calls {
		if c.Agent != "ops" || c.Prompt != "deploy it" {
			t.Errorf("call %s: agent %q prompt %q", c.TaskID, c.Agent, c.Prompt)
		}
		if c.Kind == deferred.KindApproval && (c.OnTimeout != "deny" || !c.Expires.Equal(c.Requested().Add(time.Hour))) {
			t.Errorf("approval %s: expires %v on timeout %q", c.TaskID, c.Expires, c.OnTimeout)
		}
	}
	if got, _ := w.desk.Calls(ctx, pending.Filter{Tool: "ask"}); len(got) != 1 || got[0].ConversationID != st2.ID {
		t.Errorf("Calls(tool ask) = %+v", got)
	}
	if got, _ := w.desk.Calls(ctx, pending.Filter{Conversation: st1.ID}); len(got) != 1 {
		t.Errorf("Calls(conversation) = %+v", got)
	}

	task := st1.Pending.Tasks[0].TaskID
	_, err = w.desk.Decide(ctx, st1.ID, task, protocol.Decision{Approved: true, OverrideArgs: json.RawMessage(`{"target":5}`), Channel: protocol.ChannelAPI})
	var ae *pending.ArgsError
	if !errors.As(err, &ae) || ae.Message != "target: must be a string, not an integer (5)" {
		t.Fatalf("an edit failing the schema: %v, want an ArgsError in a person's words", err)
	}
	c, err := w.desk.Call(ctx, st1.ID, task)
	if err != nil || c.Tool != "deploy" {
		t.Fatalf("Call after a refused edit = %+v, %v; want it pending", c, err)
	}
	subject, err := w.desk.Decide(ctx, st1.ID, task, protocol.Decision{Approved: true, OverrideArgs: json.RawMessage(`{ "target" : "c" }`), By: "ann", Channel: protocol.ChannelAPI})
	if err != nil {
		t.Fatal(err)
	}
	stream, err := w.js.Stream(ctx, "TOOLS_DECISIONS")
	if err != nil {
		t.Fatal(err)
	}
	m, err := stream.GetLastMsgForSubject(ctx, subject)
	if err != nil {
		t.Fatal(err)
	}
	var d protocol.Decision
	if err := json.Unmarshal(m.Data, &d); err != nil {
		t.Fatal(err)
	}
	wantDigest, _ := protocol.ArgsDigest(json.RawMessage(`{"target":"a"}`))
	if string(d.OverrideArgs) != `{"target":"c"}` || d.ArgsDigest != wantDigest || d.By != "ann" {
		t.Errorf("published %+v, want the edit compact, bound to the arguments pending", d)
	}
	var re *conversation.RefusedError
	if _, err := w.desk.Decide(ctx, st1.ID, task, protocol.Decision{Approved: false}); !errors.As(err, &re) || re.Reason != conversation.ReasonDuplicate {
		t.Errorf("a second decision: %v, want refused as a duplicate", err)
	}
	if _, err := w.desk.Decide(ctx, st1.ID, protocol.NewID(), protocol.Decision{Approved: true}); !errors.As(err, &re) || re.Reason != conversation.ReasonUnknownTask {
		t.Errorf("a decision of an unknown task: %v, want refused", err)
	}
	if _, err := w.desk.Call(ctx, st1.ID, protocol.NewID()); !errors.Is(err, pending.ErrNotPending) {
		t.Errorf("Call of an unknown task: %v, want ErrNotPending", err)
	}
	if got, _ := w.desk.Calls(ctx, pending.Filter{Conversation: st1.ID}); len(got) != 0 {
		t.Errorf("the decided call still waits: %+v", got)
	}
}
