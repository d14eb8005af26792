package mcptool_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/offload-dev/offload/pkg/mcptool"
	"github.com/offload-dev/offload/pkg/tool"
)

// elicitAndDefer runs trigger-elicitation-request as attempt 0 of task:
// the server's elicitation/create defers the call to a person.
func elicitAndDefer(t *testing.T, el *tool.Tool, task string) map[string]any {
	t.Helper()
	_, err := el.Run(context.Background(), &tool.RunContext{TaskID: task}, json.RawMessage(`{}`))
	var cd *tool.CallDeferred
	if !errors.As(err, &cd) {
		t.Fatalf("attempt 0: %v, want a deferral", err)
	}
	return cd.Metadata
}

// TestElicitation: a server's elicitation/create defers the call (its
// answer to the next attempt, the message and requested schema in the
// metadata) while the MCP call stays open; the next attempt brings the
// answer, which the server receives, and the call goes on to its result.
// A decline reaches the server as one, as does an elicitation outside a
// worker; an answer for a call this server does not hold is an unknown
// effect, never a new call.
func TestElicitation(t *testing.T) {
	s := startEverything(t, mcptool.ServerConfig{Tools: []string{"trigger-elicitation-request"}}, mcptool.Options{})
	el := toolNamed(t, s, "trigger-elicitation-request")

	md := elicitAndDefer(t, el, "task-accept")
	if !tool.AnswersNextAttempt(md) || md[mcptool.MetaServer] != "everything" {
		t.Fatalf("deferral metadata %v", md)
	}
	e, _ := md[mcptool.MetaElicitation].(map[string]any)
	schema, _ := e["requestedSchema"].(map[string]any)
	if !strings.Contains(e["message"].(string), "Please provide inputs") || schema["properties"] == nil {
		t.Fatalf("elicitation %v", e)
	}
	answer := map[string]any{"action": "accept", "content": map[string]any{"name": "Ada Lovelace", "check": true}}
	v, err := el.Run(context.Background(), &tool.RunContext{TaskID: "task-accept", Attempt: 1,
		ToolCallMetadata: map[string]any{tool.AnswerMetaKey: answer}}, json.RawMessage(`{}`))
	if err != nil {
		t.Fatalf("attempt 1: %v", err)
	}
	if out, _ := v.(string); !strings.Contains(out, "- Name: Ada Lovelace") || !strings.Contains(out, "- Agreed to terms: true") {
		t.Errorf("result %#v", v)
	}

	elicitAndDefer(t, el, "task-decline")
	v, err = el.Run(context.Background(), &tool.RunContext{TaskID: "task-decline", Attempt: 1,
		ToolCallMetadata: map[string]any{tool.AnswerMetaKey: map[string]any{"action": "decline", "message": "no"}}}, json.RawMessage(`{}`))
	if out, _ := v.(string); err != nil || !strings.Contains(out, "User declined") {
		t.Errorf("declined: %#v, %v", v, err)
	}

	// Outside a worker (no task to bring an answer) the server is told
	// the request is declined, and the call goes on to its result.
	v, err = el.Run(context.Background(), &tool.RunContext{}, json.RawMessage(`{}`))
	if out, _ := v.(string); err != nil || !strings.Contains(out, "User declined") {
		t.Errorf("without a task: %#v, %v", v, err)
	}

	_, err = el.Run(context.Background(), &tool.RunContext{TaskID: "task-unknown", Attempt: 1,
		ToolCallMetadata: map[string]any{tool.AnswerMetaKey: answer}}, json.RawMessage(`{}`))
	var ar *tool.ApprovalRequired
	if !errors.As(err, &ar) || ar.Metadata[tool.EffectMetaKey] != tool.EffectUnknown {
		t.Errorf("an answer for a call not held here: %v", err)
	}
}

// TestTaskElicitation: an MCP task that needs input (input_required, the
// elicitation delivered with tasks/result and naming the task) defers the
// call the same way; the answer reaches the server and the task completes
// with it.
func TestTaskElicitation(t *testing.T) {
	s := startEverything(t, mcptool.ServerConfig{Tools: []string{"simulate-research-query"}}, mcptool.Options{})
	rq := toolNamed(t, s, "simulate-research-query")
	_, err := rq.Run(context.Background(), &tool.RunContext{TaskID: "task-python"}, json.RawMessage(`{"topic":"python","ambiguous":true}`))
	var cd *tool.CallDeferred
	if !errors.As(err, &cd) {
		t.Fatalf("attempt 0: %v, want a deferral", err)
	}
	e, _ := cd.Metadata[mcptool.MetaElicitation].(map[string]any)
	if msg, _ := e["message"].(string); !strings.Contains(msg, "could have multiple interpretations") {
		t.Fatalf("elicitation %v", e)
	}
	answer := map[string]any{"action": "accept", "content": map[string]any{"interpretation": "snake"}}
	v, err := rq.Run(context.Background(), &tool.RunContext{TaskID: "task-python", Attempt: 1,
		ToolCallMetadata: map[string]any{tool.AnswerMetaKey: answer}}, json.RawMessage(`{"topic":"python","ambiguous":true}`))
	if err != nil {
		t.Fatalf("attempt 1: %v", err)
	}
	if out, _ := v.(string); !strings.Contains(out, `After receiving clarification ("snake")`) {
		t.Errorf("result %#v", v)
	}
}
