package liveview_test

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/offload-dev/offload/pkg/agent"
	"github.com/offload-dev/offload/pkg/agent/liveview"
	"github.com/offload-dev/offload/pkg/deferred"
	"github.com/offload-dev/offload/pkg/message"
	"github.com/offload-dev/offload/pkg/pending"
)

// An expired approval is shown as not approved in time, a denial as
// denied (SPEC §12: a timeout is never shown as a person's denial).
func TestDeferredResultsExpired(t *testing.T) {
	var out bytes.Buffer
	v := liveview.New(&out)
	v.Event(agent.Event{Type: agent.EventDeferredToolRequests, Requests: &deferred.Requests{
		Approvals: []message.ToolCall{{ToolName: "deploy", ToolCallID: "c1"}, {ToolName: "drop", ToolCallID: "c2"}},
		TaskIDs:   map[string]string{"c1": "T1", "c2": "T2"},
	}})
	v.Event(agent.Event{Type: agent.EventDeferredToolResults, Results: &deferred.Results{Approvals: map[string]any{
		"c1": deferred.ToolDenied{Message: "nobody answered within 1h", Reason: deferred.ReasonExpired},
		"c2": deferred.ToolDenied{Message: "freeze"},
	}}})
	want := "! deploy task T1 not approved in time: nobody answered within 1h\n! drop task T2 denied: freeze\n"
	if got := out.String(); !strings.HasSuffix(got, want) {
		t.Errorf("live view:\n%s\nwant it to end with:\n%s", got, want)
	}
}

// agent pending's line marks a non-blocking call, as the JSON record's
// nonblocking field does.
func TestWritePendingNonBlocking(t *testing.T) {
	var out bytes.Buffer
	liveview.WritePending(&out, []deferred.PendingTask{
		{TaskID: "T1", Kind: deferred.KindApproval, Tool: "deploy", Args: json.RawMessage(`{"target": "prod"}`), NonBlocking: true},
		{TaskID: "T2", Kind: deferred.KindExternal, Tool: "ask", Args: json.RawMessage(`{}`)},
	}, nil)
	want := "T1 approval deploy {\"target\":\"prod\"} (non-blocking)\nT2 external ask {}\n"
	if got := out.String(); got != want {
		t.Errorf("pending:\n%q\nwant\n%q", got, want)
	}
}

// agent pending shows what an MCP server's elicitation asks: its message,
// and the fields of its requested schema or the URL to open.
func TestWritePendingElicitation(t *testing.T) {
	var out bytes.Buffer
	liveview.WritePending(&out, []deferred.PendingTask{
		{TaskID: "T1", Kind: deferred.KindExternal, Tool: "ask", Args: json.RawMessage(`{}`), Metadata: map[string]any{
			"mcp.elicitation": map[string]any{"message": "Your\nname?", "requestedSchema": map[string]any{
				"type": "object", "properties": map[string]any{"name": map[string]any{}, "age": map[string]any{}}, "required": []any{"name"}}},
		}},
		{TaskID: "T2", Kind: deferred.KindExternal, Tool: "login", Args: json.RawMessage(`{}`), Metadata: map[string]any{
			"mcp.elicitation": map[string]any{"message": "Sign in"}, "mcp.url": "https://example.com/auth",
		}},
	}, nil)
	want := "T1 external ask {}\n  asks: Your name?\n  fields of the answer's content: age, name*\n" +
		"T2 external login {}\n  asks: Sign in\n  open: https://example.com/auth\n"
	if got := out.String(); got != want {
		t.Errorf("pending:\n%q\nwant\n%q", got, want)
	}
}

// A call waiting in its tool's queue is shown as such (SPEC §19), with
// its task and why.
func TestQueuedShown(t *testing.T) {
	var out bytes.Buffer
	v := liveview.New(&out)
	v.Event(agent.Event{Type: agent.EventQueued, Tool: "job", TaskID: "T1", Message: "queued: max_in_flight of tool job for tenant=acme, 2 ahead"})
	if got, want := out.String(), "⏸ job task T1: queued: max_in_flight of tool job for tenant=acme, 2 ahead\n"; got != want {
		t.Errorf("live view %q, want %q", got, want)
	}
}

// agent pending lists a call held in its tool's queue after the pending
// calls, as queued, with why and since when, and no command to resolve it.
func TestWriteQueued(t *testing.T) {
	var out bytes.Buffer
	liveview.WriteQueued(&out, []pending.Queued{{ConversationID: "C1", TaskID: "T1", Tool: "job", Tenant: "acme", Reason: "max_in_flight",
		Since: time.Date(2026, 12, 7, 22, 10, 5, 0, time.UTC)}})
	if got, want := out.String(), "T1 queued job (max_in_flight, tenant acme, since 22:10:05) in conversation C1\n"; got != want {
		t.Errorf("%q, want %q", got, want)
	}
}
