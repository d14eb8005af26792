package agui_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/offload-dev/offload/pkg/agentproc"
	"github.com/offload-dev/offload/pkg/natsjs/serve/servetest"
)

// tokens of the tests' faces.
const tokens = "operator-token-0123456789 operator ops-team\napprover-token-0123456789 approver alice\nviewer-token-0123456789 viewer bob\n"

// event is an AG-UI event as a client reads it.
type event map[string]any

func (e event) typ() string { s, _ := e["type"].(string); return s }

// post sends input to url's /agui/ops with token and returns the events
// of the stream, or the status and body of a refusal.
func post(t *testing.T, url, token string, input any) ([]event, int, string) {
	t.Helper()
	body, err := json.Marshal(input)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), servetest.Wait)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+"/agui/ops", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		var b strings.Builder
		_, _ = bufio.NewReader(resp.Body).WriteTo(&b)
		return nil, resp.StatusCode, b.String()
	}
	var out []event
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		var ev event
		if err := json.Unmarshal([]byte(data), &ev); err != nil {
			t.Fatalf("event %s: %v", data, err)
		}
		out = append(out, ev)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out, resp.StatusCode, ""
}

// types lists the events' types.
func types(evs []event) []string {
	var out []string
	for _, e := range evs {
		out = append(out, e.typ())
	}
	return out
}

// last returns the last event of evs of type typ (nil: none).
func last(evs []event, typ string) event {
	for i := len(evs) - 1; i >= 0; i-- {
		if evs[i].typ() == typ {
			return evs[i]
		}
	}
	return nil
}

func input(thread, run, text string) map[string]any {
	return map[string]any{"threadId": thread, "runId": run, "state": map[string]any{}, "tools": []any{}, "context": []any{},
		"forwardedProps": map[string]any{}, "messages": []any{map[string]any{"id": "u-" + run, "role": "user", "content": text}}}
}

// TestInterruptResumeOnOtherReplica: a run paused on two approvals ends
// with both interrupts after the snapshots; a resume sent to the other
// replica continues it and each tool runs once; the same resume sent
// again changes nothing; a viewer may not send one.
func TestInterruptResumeOnOtherReplica(t *testing.T) {
	w := servetest.Setup(t)
	a, b := w.Replica(t, "a"), w.Replica(t, "b")
	srvA, _ := a.Face(t, tokens, agentproc.FaceOptions{})
	srvB, _ := b.Face(t, tokens, agentproc.FaceOptions{})
	thread := "5b9e2a52-1c1f-4d4e-9a53-6a3bd0c1f0aa"

	evs, code, body := post(t, srvA.URL, "operator-token-0123456789", input(thread, "run-1", "deploys web db"))
	if code != http.StatusOK {
		t.Fatalf("POST: %d %s", code, body)
	}
	got := strings.Join(types(evs), " ")
	if !strings.HasPrefix(got, "RUN_STARTED CUSTOM STEP_STARTED TOOL_CALL_START TOOL_CALL_ARGS TOOL_CALL_END TOOL_CALL_START") ||
		!strings.HasSuffix(got, "STEP_FINISHED STATE_SNAPSHOT MESSAGES_SNAPSHOT RUN_FINISHED") {
		t.Fatalf("events: %s", got)
	}
	fin := last(evs, "RUN_FINISHED")
	outcome, _ := fin["outcome"].(map[string]any)
	ints, _ := outcome["interrupts"].([]any)
	if outcome["type"] != "interrupt" || len(ints) != 2 || fin["threadId"] != thread || fin["runId"] != "run-1" {
		t.Fatalf("RUN_FINISHED: %v", fin)
	}
	var resume []any
	for _, x := range ints {
		in := x.(map[string]any)
		md, _ := in["metadata"].(map[string]any)
		if in["reason"] != "tool_call" || in["toolCallId"] == "" || md["args_digest"] == "" || in["responseSchema"] == nil {
			t.Fatalf("interrupt: %v", in)
		}
		resume = append(resume, map[string]any{"interruptId": in["id"], "status": "resolved",
			"payload": map[string]any{"approved": true, "args_digest": md["args_digest"]}})
	}

	res := input(thread, "run-2", "")
	res["messages"] = []any{}
	res["resume"] = resume
	if _, code, _ := post(t, srvB.URL, "viewer-token-0123456789", res); code != http.StatusForbidden {
		t.Fatalf("a viewer's resume: %d, want 403", code)
	}
	evs, code, body = post(t, srvB.URL, "approver-token-0123456789", res)
	if code != http.StatusOK {
		t.Fatalf("resume: %d %s", code, body)
	}
	fin = last(evs, "RUN_FINISHED")
	if outcome, _ := fin["outcome"].(map[string]any); fin == nil || outcome["type"] != "success" {
		t.Fatalf("resume's events: %v", types(evs))
	}
	results := 0
	for _, e := range evs {
		if e.typ() == "TOOL_CALL_RESULT" && strings.HasPrefix(e["content"].(string), "deployed ") {
			results++
		}
	}
	if results != 2 {
		t.Fatalf("resume's events: %v", evs)
	}
	w.Mu.Lock()
	deploys := w.Deploys["web"] + w.Deploys["db"]
	w.Mu.Unlock()
	if deploys != 2 {
		t.Fatalf("deploys: %d, want 2", deploys)
	}

	// The same resume again, on the first replica: answered from what is
	// stored, nothing run again.
	res["runId"] = "run-3"
	evs, code, body = post(t, srvA.URL, "approver-token-0123456789", res)
	if code != http.StatusOK || last(evs, "RUN_FINISHED") == nil || last(evs, "RUN_ERROR") != nil {
		t.Fatalf("resume again: %d %s %v", code, body, evs)
	}
	w.Mu.Lock()
	deploys = w.Deploys["web"] + w.Deploys["db"]
	w.Mu.Unlock()
	if deploys != 2 {
		t.Fatalf("deploys after the resume repeated: %d, want 2", deploys)
	}
}
