package agui_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/offload-dev/offload/pkg/agentproc"
	"github.com/offload-dev/offload/pkg/natsjs/serve/servetest"
)

// pickColor is a frontend tool's definition, as an AG-UI input has it.
var pickColor = map[string]any{"name": "pick_color", "description": "Asks the user to pick a colour.",
	"parameters": map[string]any{"type": "object", "properties": map[string]any{"target": map[string]any{"type": "string"}}}}

// toolMessage is a frontend's result of its tool's call.
func toolMessage(thread, run, callID, content string) map[string]any {
	in := input(thread, run, "")
	in["tools"] = []any{pickColor}
	in["messages"] = []any{
		map[string]any{"id": "u-1", "role": "user", "content": "pick_color red"},
		map[string]any{"id": "a-" + callID, "role": "assistant", "toolCalls": []any{map[string]any{"id": callID, "type": "function",
			"function": map[string]any{"name": "pick_color", "arguments": `{"target":"red"}`}}}},
		map[string]any{"id": "t-" + run, "role": "tool", "toolCallId": callID, "content": content},
	}
	return in
}

// frontendCall asserts that evs end a run paused on a call of the
// frontend tool pick_color of ID callID: the call shown as a tool call,
// RUN_FINISHED a success without interrupts, the call listed pending as
// the frontend's.
func frontendCall(t *testing.T, evs []event, callID string) {
	t.Helper()
	var start, end bool
	for _, e := range evs {
		switch {
		case e.typ() == "TOOL_CALL_START" && e["toolCallId"] == callID && e["toolCallName"] == "pick_color":
			start = true
		case e.typ() == "TOOL_CALL_END" && e["toolCallId"] == callID:
			end = true
		}
	}
	fin := last(evs, "RUN_FINISHED")
	o, _ := fin["outcome"].(map[string]any)
	if !start || !end || fin == nil || o["type"] != "success" || o["interrupts"] != nil {
		t.Fatalf("the frontend tool's call %s: %v", callID, evs)
	}
	st := last(evs, "STATE_SNAPSHOT")
	snap, _ := st["snapshot"].(map[string]any)
	waiting, _ := snap["pending"].([]any)
	if snap["status"] != "paused" || len(waiting) != 1 || waiting[0].(map[string]any)["frontend"] != true ||
		waiting[0].(map[string]any)["tool_call_id"] != callID {
		t.Fatalf("STATE_SNAPSHOT: %v", st)
	}
}

// TestFrontendTools: an input's tools are offered to the model; its call
// of one is shown as a tool call and ends the run without an interrupt;
// the frontend's tool message sent to the other replica answers it (the
// continuation there is offered the tool too, and calls it again); the
// same tool message again changes nothing; a tool message of a call the
// thread never made is a RUN_ERROR; a later turn's tools replace the
// thread's; bad tool definitions are 400s.
func TestFrontendTools(t *testing.T) {
	w := servetest.Setup(t)
	a, b := w.Replica(t, "a"), w.Replica(t, "b")
	toks := tokens + "answerer-token-0123456789 answerer carol\n"
	srvA, _ := a.Face(t, toks, agentproc.FaceOptions{})
	srvB, _ := b.Face(t, toks, agentproc.FaceOptions{})
	const thread = "frontend-thread"

	for name, tool := range map[string]map[string]any{
		"a name with a space":            {"name": "pick color", "parameters": map[string]any{"type": "object"}},
		"an agent's own tool":            {"name": "deploy", "parameters": map[string]any{"type": "object"}},
		"a schema that does not compile": {"name": "pick_color", "parameters": map[string]any{"type": 5}},
		"a definition too large":         {"name": "pick_color", "description": strings.Repeat("x", 17<<10)},
	} {
		in := input(thread, "bad", "pick_color red")
		in["tools"] = []any{tool}
		if _, code, body := post(t, srvA.URL, "operator-token-0123456789", in); code != http.StatusBadRequest || !strings.Contains(body, "bad_tool") {
			t.Fatalf("%s: %d %s, want 400 bad_tool", name, code, body)
		}
	}
	many := input(thread, "bad", "pick_color red")
	var tools []any
	for i := range 33 {
		tools = append(tools, map[string]any{"name": fmt.Sprintf("t%d", i)})
	}
	many["tools"] = tools
	if _, code, body := post(t, srvA.URL, "operator-token-0123456789", many); code != http.StatusBadRequest || !strings.Contains(body, "bad_tool") {
		t.Fatalf("33 tools: %d %s, want 400 bad_tool", code, body)
	}

	in := input(thread, "r1", "pick_color red")
	in["tools"] = []any{pickColor}
	evs, code, body := post(t, srvA.URL, "operator-token-0123456789", in)
	if code != http.StatusOK {
		t.Fatalf("POST: %d %s", code, body)
	}
	frontendCall(t, evs, "call_1")

	// Answered on the other replica: its continuation calls the tool
	// again, as only a run offered it can.
	if _, code, _ := post(t, srvB.URL, "operator-token-0123456789", toolMessage(thread, "r2", "call_1", "again navy")); code != http.StatusForbidden {
		t.Fatalf("an operator's tool message: %d, want 403 (an answer is an answerer's)", code)
	}
	evs, code, body = post(t, srvB.URL, "answerer-token-0123456789", toolMessage(thread, "r2", "call_1", "again navy"))
	if code != http.StatusOK {
		t.Fatalf("tool message: %d %s", code, body)
	}
	frontendCall(t, evs, "call_1_again")

	evs, _, _ = post(t, srvA.URL, "answerer-token-0123456789", toolMessage(thread, "r3", "call_1_again", "crimson"))
	fin := last(evs, "RUN_FINISHED")
	if o, _ := fin["outcome"].(map[string]any); fin == nil || o["type"] != "success" || !strings.Contains(fmt.Sprint(fin["result"]), "done crimson") {
		t.Fatalf("the second answer's continuation: %v", evs)
	}

	// The same tool messages again, on either replica: answered from
	// what is stored, nothing applied twice.
	for _, srv := range []string{srvB.URL, srvA.URL} {
		evs, _, _ = post(t, srv, "answerer-token-0123456789", toolMessage(thread, "r4", "call_1_again", "crimson"))
		fin = last(evs, "RUN_FINISHED")
		if fin == nil || last(evs, "RUN_ERROR") != nil || !strings.Contains(fmt.Sprint(fin["result"]), "done crimson") {
			t.Fatalf("the tool message again: %v", evs)
		}
	}
	w.Mu.Lock()
	n := w.Continuations["crimson"]
	w.Mu.Unlock()
	if n != 1 {
		t.Fatalf("continuations with the answer: %d, want 1", n)
	}

	evs, _, _ = post(t, srvB.URL, "answerer-token-0123456789", toolMessage(thread, "r5", "call_9", "teal"))
	if e := last(evs, "RUN_ERROR"); e == nil || e["code"] != "unknown_tool_call" || !strings.Contains(e["message"].(string), "call_9") {
		t.Fatalf("a tool message of no call: %v", evs)
	}

	// A later turn's tools replace the thread's: without any, the
	// model's call of pick_color is of no tool it is offered.
	evs, _, _ = post(t, srvB.URL, "operator-token-0123456789", input(thread, "r6", "pick_color blue"))
	st := last(evs, "STATE_SNAPSHOT")
	if snap, _ := st["snapshot"].(map[string]any); snap["status"] != "finished" || last(evs, "RUN_FINISHED") == nil {
		t.Fatalf("a turn without tools: %v", evs)
	}
}

// TestFrontendToolsBlock: an agent whose approvals and external calls
// are non-blocking (spec approve: background) still ends the run on a
// frontend tool's call, which only the frontend's next input answers.
func TestFrontendToolsBlock(t *testing.T) {
	w := servetest.Setup(t)
	w.NonBlocking = true
	a := w.Replica(t, "a")
	srv, _ := a.Face(t, tokens+"answerer-token-0123456789 answerer carol\n", agentproc.FaceOptions{})
	in := input("block-thread", "r1", "pick_color red")
	in["tools"] = []any{pickColor}
	evs, code, body := post(t, srv.URL, "operator-token-0123456789", in)
	if code != http.StatusOK {
		t.Fatalf("POST: %d %s", code, body)
	}
	frontendCall(t, evs, "call_1")
	evs, _, _ = post(t, srv.URL, "answerer-token-0123456789", toolMessage("block-thread", "r2", "call_1", "crimson"))
	if fin := last(evs, "RUN_FINISHED"); fin == nil || !strings.Contains(fmt.Sprint(fin["result"]), "done crimson") {
		t.Fatalf("the answer's continuation: %v", evs)
	}
}
