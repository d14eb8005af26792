package agui_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/offload-dev/offload/internal/aguitest"
	"github.com/offload-dev/offload/internal/offloadtest"
	"github.com/offload-dev/offload/pkg/agentproc"
	"github.com/offload-dev/offload/pkg/natsjs/serve/servetest"
	"github.com/offload-dev/offload/pkg/session"
)

// TestClientTwoReplicas drives two agent serve replicas with the AG-UI
// JS client: a run streams a tool call and text; a run pauses on two
// approvals with both interrupts; a resume sent to the other replica
// continues it and each tool runs once; the same resume sent again
// changes nothing.
func TestClientTwoReplicas(t *testing.T) {
	aguitest.Script(t)
	w := servetest.Setup(t)
	close(w.SlowGate) // slow returns at once
	w.Stream = true   // text deltas, as a streaming model sends them
	a, b := w.Replica(t, "a"), w.Replica(t, "b")
	srvA, _ := a.Face(t, tokens, agentproc.FaceOptions{})
	srvB, _ := b.Face(t, tokens, agentproc.FaceOptions{})
	ctx, cancel := context.WithTimeout(t.Context(), 2*servetest.Wait)
	defer cancel()
	const op, ap = "operator-token-0123456789", "approver-token-0123456789"

	// A run streams a tool call, its progress and result, then text.
	res := aguitest.Do(ctx, t, aguitest.Run{URL: srvA.URL + "/agui/ops", Token: op, ThreadID: "thread-text", RunID: "r1", Prompt: "slow s1"})
	got := strings.Join(res.Types(), " ")
	for _, want := range []string{"RUN_STARTED", "TOOL_CALL_START", "TOOL_CALL_ARGS", "TOOL_CALL_END", "CUSTOM", "TOOL_CALL_RESULT",
		"TEXT_MESSAGE_START", "TEXT_MESSAGE_CONTENT", "TEXT_MESSAGE_END", "MESSAGES_SNAPSHOT", "RUN_FINISHED"} {
		if !strings.Contains(got, want) {
			t.Fatalf("text run: no %s in %s (error %q)", want, got, res.Error)
		}
	}
	if res.Error != "" || res.Last("TOOL_CALL_START")["toolCallName"] != "slow" || !strings.Contains(text(res), "done slowed s1") {
		t.Fatalf("text run: %q %v", res.Error, res.Events)
	}
	deltas := 0
	for _, e := range res.Events {
		if e.Type() == "TEXT_MESSAGE_CONTENT" {
			deltas++
		}
	}
	if deltas < 2 {
		t.Fatalf("text run: the text in %d delta(s), not streamed", deltas)
	}
	progress := false
	for _, e := range res.Events {
		progress = progress || e.Type() == "CUSTOM" && e["name"] == "offload.progress"
	}
	if !progress {
		t.Fatalf("text run: no offload.progress in %v", res.Events)
	}

	// A run pauses on two approvals: both interrupts, after the snapshots.
	const thread = "7e1f9c3a-2b4d-4c8e-9f10-123456789abc"
	res = aguitest.Do(ctx, t, aguitest.Run{URL: srvA.URL + "/agui/ops", Token: op, ThreadID: thread, RunID: "r2", Prompt: "deploys web db"})
	types := res.Types()
	if res.Error != "" || len(types) < 3 || strings.Join(types[len(types)-3:], " ") != "STATE_SNAPSHOT MESSAGES_SNAPSHOT RUN_FINISHED" {
		t.Fatalf("pause: %q %v", res.Error, types)
	}
	interrupts := interruptsOf(t, res.Last("RUN_FINISHED"))
	if len(interrupts) != 2 {
		t.Fatalf("pause: interrupts %v", interrupts)
	}
	var resume []map[string]any
	for _, in := range interrupts {
		md, _ := in["metadata"].(map[string]any)
		resume = append(resume, map[string]any{"interruptId": in["id"], "status": "resolved",
			"payload": map[string]any{"approved": true, "args_digest": md["args_digest"]}})
	}

	// The resume, on the other replica: the calls run once each.
	res = aguitest.Do(ctx, t, aguitest.Run{URL: srvB.URL + "/agui/ops", Token: ap, ThreadID: thread, RunID: "r3", Messages: res.Messages, Resume: resume})
	if res.Error != "" || outcome(res.Last("RUN_FINISHED")) != "success" || !strings.Contains(text(res), "done deployed") {
		t.Fatalf("resume: %q %v", res.Error, res.Types())
	}
	deploys := func() int {
		w.Mu.Lock()
		defer w.Mu.Unlock()
		return w.Deploys["web"] + w.Deploys["db"]
	}
	if n := deploys(); n != 2 {
		t.Fatalf("deploys: %d, want 2", n)
	}
	// The same resume again: nothing runs again.
	again := aguitest.Do(ctx, t, aguitest.Run{URL: srvB.URL + "/agui/ops", Token: ap, ThreadID: thread, RunID: "r4", Messages: res.Messages, Resume: resume})
	if again.Error != "" || outcome(again.Last("RUN_FINISHED")) != "success" || again.Last("TOOL_CALL_RESULT") != nil {
		t.Fatalf("resume again: %q %v", again.Error, again.Events)
	}
	if n := deploys(); n != 2 {
		t.Fatalf("deploys after the resume repeated: %d, want 2", n)
	}
}

// text is the text the client received in TEXT_MESSAGE_CONTENT events.
func text(r *aguitest.Result) string {
	var b strings.Builder
	for _, e := range r.Events {
		if e.Type() == "TEXT_MESSAGE_CONTENT" {
			s, _ := e["delta"].(string)
			b.WriteString(s)
		}
	}
	return b.String()
}

// outcome is a RUN_FINISHED's outcome type.
func outcome(e aguitest.Event) string {
	o, _ := e["outcome"].(map[string]any)
	s, _ := o["type"].(string)
	return s
}

// interruptsOf returns a RUN_FINISHED's interrupts.
func interruptsOf(t *testing.T, e aguitest.Event) []map[string]any {
	t.Helper()
	o, _ := e["outcome"].(map[string]any)
	if o["type"] != "interrupt" {
		t.Fatalf("RUN_FINISHED %v: not an interrupt", e)
	}
	var out []map[string]any
	for _, x := range o["interrupts"].([]any) {
		out = append(out, x.(map[string]any))
	}
	return out
}

// TestClientExpiredResume: an approval whose timeout decided it while
// the frontend waited is refused by name when the client resumes it: a
// RUN_ERROR with code expired naming the interrupt, and the call never
// runs.
func TestClientExpiredResume(t *testing.T) {
	aguitest.Script(t)
	w := servetest.Setup(t)
	w.Approval = &session.ApprovalPolicy{Timeout: 500 * time.Millisecond, OnTimeout: session.OnTimeoutDeny}
	a, b := w.Replica(t, "a"), w.Replica(t, "b")
	srvA, _ := a.Face(t, tokens, agentproc.FaceOptions{})
	srvB, _ := b.Face(t, tokens, agentproc.FaceOptions{})
	ctx, cancel := context.WithTimeout(t.Context(), 2*servetest.Wait)
	defer cancel()
	const thread = "0d7c1e2f-3a4b-4c5d-8e6f-abcdefabcdef"

	res := aguitest.Do(ctx, t, aguitest.Run{URL: srvA.URL + "/agui/ops", Token: "operator-token-0123456789", ThreadID: thread, RunID: "r1", Prompt: "deploy prod"})
	interrupts := interruptsOf(t, res.Last("RUN_FINISHED"))
	if len(interrupts) != 1 || interrupts[0]["expiresAt"] == nil {
		t.Fatalf("interrupts %v: want one with expiresAt", interrupts)
	}
	id := interrupts[0]["id"].(string)
	conv := conversationOf(t, res)
	// No signal reaches a test when the timeout's decision is applied:
	// the stored status says so.
	offloadtest.Eventually(t, "the expired call decided and the run finished", func() bool {
		c, err := b.Svc.Get(ctx, conv)
		return err == nil && c.Status == "finished"
	})

	res = aguitest.Do(ctx, t, aguitest.Run{URL: srvB.URL + "/agui/ops", Token: "approver-token-0123456789", ThreadID: thread, RunID: "r2",
		Messages: res.Messages, Resume: []map[string]any{{"interruptId": id, "status": "resolved", "payload": map[string]any{"approved": true}}}})
	re := res.Last("RUN_ERROR")
	if re == nil || re["code"] != "expired" || !strings.Contains(re["message"].(string), id) {
		t.Fatalf("resume of an expired approval: error %q, events %v", res.Error, res.Events)
	}
	w.Mu.Lock()
	defer w.Mu.Unlock()
	if w.Deploys["prod"] != 0 {
		t.Fatalf("deploys: %d, want 0", w.Deploys["prod"])
	}
}

// conversationOf is the conversation the offload.conversation event of r
// names.
func conversationOf(t *testing.T, r *aguitest.Result) string {
	t.Helper()
	for _, e := range r.Events {
		if e.Type() == "CUSTOM" && e["name"] == "offload.conversation" {
			v, _ := e["value"].(map[string]any)
			if c, ok := v["conversation_id"].(string); ok {
				return c
			}
		}
	}
	t.Fatalf("no offload.conversation in %v", r.Types())
	return ""
}

// TestClientFrontendTool drives a frontend tool with the AG-UI JS client:
// the input's tool is called by the model, the run ends with the tool
// call and no interrupt; the client's tool message, sent to the other
// replica with the messages it kept, answers it and the run finishes
// with the answer.
func TestClientFrontendTool(t *testing.T) {
	aguitest.Script(t)
	w := servetest.Setup(t)
	a, b := w.Replica(t, "a"), w.Replica(t, "b")
	toks := tokens + "answerer-token-0123456789 answerer carol\n"
	srvA, _ := a.Face(t, toks, agentproc.FaceOptions{})
	srvB, _ := b.Face(t, toks, agentproc.FaceOptions{})
	ctx, cancel := context.WithTimeout(t.Context(), 2*servetest.Wait)
	defer cancel()
	const thread = "0b8f6f0e-4c8a-4d55-9a1e-5f2b7c9d1e23"
	tools := []map[string]any{pickColor}

	res := aguitest.Do(ctx, t, aguitest.Run{URL: srvA.URL + "/agui/ops", Token: "operator-token-0123456789", ThreadID: thread, RunID: "r1",
		Prompt: "pick_color red", Tools: tools})
	if res.Error != "" || res.Last("TOOL_CALL_START")["toolCallName"] != "pick_color" || outcome(res.Last("RUN_FINISHED")) != "success" {
		t.Fatalf("the frontend tool's call: %q %v", res.Error, res.Events)
	}
	id, _ := res.Last("TOOL_CALL_START")["toolCallId"].(string)
	res = aguitest.Do(ctx, t, aguitest.Run{URL: srvB.URL + "/agui/ops", Token: "answerer-token-0123456789", ThreadID: thread, RunID: "r2",
		Messages: res.Messages, Tools: tools, ToolResult: &aguitest.ToolResult{ToolCallID: id, Content: "crimson"}})
	if res.Error != "" || outcome(res.Last("RUN_FINISHED")) != "success" || !strings.Contains(text(res), "done crimson") {
		t.Fatalf("the tool message's continuation: %q %v", res.Error, res.Events)
	}
}
