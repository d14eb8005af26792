package agui_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/offload-dev/offload/pkg/agentproc"
	"github.com/offload-dev/offload/pkg/message"
	"github.com/offload-dev/offload/pkg/natsjs/serve/servetest"
	"github.com/offload-dev/offload/pkg/protocol"
	"github.com/offload-dev/offload/pkg/session"
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

// TestResumeChecks: a ULID thread is its conversation; a call decided
// elsewhere (the API) meanwhile is not asked again and its entry changes
// nothing; a new message while calls wait, and an entry whose
// args_digest is not the arguments', are RUN_ERRORs naming why, nothing
// published; the resume's decision is recorded with its channel (agui)
// and the token's name; malformed inputs are 400s.
func TestResumeChecks(t *testing.T) {
	w := servetest.Setup(t)
	a := w.Replica(t, "a")
	srv, _ := a.Face(t, tokens, agentproc.FaceOptions{})
	const op, ap = "operator-token-0123456789", "approver-token-0123456789"
	thread := protocol.NewID()

	evs, code, body := post(t, srv.URL, op, input(thread, "r1", "deploys web db"))
	if code != http.StatusOK {
		t.Fatalf("POST: %d %s", code, body)
	}
	if c := customValue(evs, "offload.conversation")["conversation_id"]; c != thread {
		t.Fatalf("the conversation of ULID thread %s: %v", thread, c)
	}
	ints := interrupts(t, last(evs, "RUN_FINISHED"))
	if len(ints) != 2 {
		t.Fatalf("interrupts: %v", ints)
	}
	first, second := ints[0], ints[1]

	// The first decided over the API meanwhile.
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, srv.URL+"/v1/conversations/"+thread+"/calls/"+first["id"].(string)+"/decision",
		strings.NewReader(`{"approved":true}`))
	req.Header.Set("Authorization", "Bearer "+ap)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("API decision: %d", resp.StatusCode)
	}

	// A new message while a call waits.
	evs, _, _ = post(t, srv.URL, op, input(thread, "r2", "hello"))
	if e := last(evs, "RUN_ERROR"); e == nil || e["code"] != "pending" {
		t.Fatalf("a message while calls wait: %v", evs)
	}
	// A stale digest.
	entry := func(in map[string]any, digest string) map[string]any {
		return map[string]any{"interruptId": in["id"], "status": "resolved", "payload": map[string]any{"approved": true, "args_digest": digest}}
	}
	digest := func(in map[string]any) string { return in["metadata"].(map[string]any)["args_digest"].(string) }
	res := input(thread, "r3", "")
	res["messages"] = []any{}
	res["resume"] = []any{entry(second, strings.Repeat("0", 64))}
	evs, _, _ = post(t, srv.URL, ap, res)
	if e := last(evs, "RUN_ERROR"); e == nil || e["code"] != "stale" || !strings.Contains(e["message"].(string), second["id"].(string)) {
		t.Fatalf("a stale digest: %v", evs)
	}
	// Both entries: the first, decided already, changes nothing.
	res["resume"] = []any{entry(first, digest(first)), entry(second, digest(second))}
	evs, _, _ = post(t, srv.URL, ap, res)
	if fin := last(evs, "RUN_FINISHED"); fin == nil || fin["outcome"].(map[string]any)["type"] != "success" {
		t.Fatalf("resume: %v", evs)
	}
	w.Mu.Lock()
	web, db := w.Deploys["web"], w.Deploys["db"]
	w.Mu.Unlock()
	if web != 1 || db != 1 {
		t.Fatalf("deploys web %d db %d, want 1 each", web, db)
	}
	st, err := a.Svc.State(t.Context(), thread)
	if err != nil {
		t.Fatal(err)
	}
	channels := map[string]string{}
	for _, m := range st.History {
		for _, p := range m.Parts {
			if tr, ok := p.(message.ToolReturn); ok {
				if note, ok := tr.Metadata[session.DecisionMetaKey].(map[string]any); ok {
					channels[note["task_id"].(string)] = fmt.Sprint(note["channel"], " ", note["by"])
				}
			}
		}
	}
	if channels[first["id"].(string)] != "api alice" || channels[second["id"].(string)] != "agui alice" {
		t.Fatalf("decisions recorded: %v", channels)
	}

	// Malformed inputs.
	for name, in := range map[string]any{
		"no thread":        input("", "r4", "hi"),
		"no user message":  map[string]any{"threadId": thread, "runId": "r5", "messages": []any{map[string]any{"id": "x", "role": "assistant", "content": "hi"}}},
		"not an interrupt": map[string]any{"threadId": thread, "runId": "r6", "messages": []any{}, "resume": []any{map[string]any{"interruptId": "x", "status": "resolved"}}},
		"not JSON":         "{",
	} {
		if _, code, _ := post(t, srv.URL, op, in); code != http.StatusBadRequest {
			t.Errorf("%s: %d, want 400", name, code)
		}
	}
}

// customValue returns the value of the last CUSTOM event named name.
func customValue(evs []event, name string) map[string]any {
	for i := len(evs) - 1; i >= 0; i-- {
		if evs[i].typ() == "CUSTOM" && evs[i]["name"] == name {
			v, _ := evs[i]["value"].(map[string]any)
			return v
		}
	}
	return nil
}

// interrupts returns a RUN_FINISHED's interrupts.
func interrupts(t *testing.T, fin event) []map[string]any {
	t.Helper()
	o, _ := fin["outcome"].(map[string]any)
	if o["type"] != "interrupt" {
		t.Fatalf("RUN_FINISHED %v: not an interrupt", fin)
	}
	var out []map[string]any
	for _, x := range o["interrupts"].([]any) {
		out = append(out, x.(map[string]any))
	}
	return out
}

// TestExternalInterrupt: an external call pauses the run as an
// input_required interrupt; a resume by an approver is refused by name
// (an answer is an answerer's), nothing published; the answerer's resume
// is the call's answer, and the run goes on with it.
func TestExternalInterrupt(t *testing.T) {
	w := servetest.Setup(t)
	a := w.Replica(t, "a")
	srv, _ := a.Face(t, tokens+"answerer-token-0123456789 answerer carol\n", agentproc.FaceOptions{})
	const thread = "external-thread"
	evs, code, body := post(t, srv.URL, "operator-token-0123456789", input(thread, "r1", "ask q"))
	if code != http.StatusOK {
		t.Fatalf("POST: %d %s", code, body)
	}
	ints := interrupts(t, last(evs, "RUN_FINISHED"))
	if len(ints) != 1 || ints[0]["reason"] != "input_required" || ints[0]["toolCallId"] != "call_1" {
		t.Fatalf("interrupts: %v", ints)
	}
	res := input(thread, "r2", "")
	res["messages"] = []any{}
	res["resume"] = []any{map[string]any{"interruptId": ints[0]["id"], "status": "resolved", "payload": "forty-two"}}
	evs, _, _ = post(t, srv.URL, "approver-token-0123456789", res)
	if e := last(evs, "RUN_ERROR"); e == nil || e["code"] != "forbidden" || !strings.Contains(e["message"].(string), ints[0]["id"].(string)) {
		t.Fatalf("an approver's answer: %v", evs)
	}
	evs, _, _ = post(t, srv.URL, "answerer-token-0123456789", res)
	fin := last(evs, "RUN_FINISHED")
	if fin == nil || fin["outcome"].(map[string]any)["type"] != "success" || !strings.Contains(fmt.Sprint(fin["result"]), "forty-two") {
		t.Fatalf("the answer's continuation: %v", evs)
	}
}

// TestTenantBoundToken: a token bound to a tenant starts its tenant's
// threads over AG-UI, as over the API (SPEC §19), and may not run a
// thread of another tenant (403 wrong_tenant, before any event).
func TestTenantBoundToken(t *testing.T) {
	w := servetest.Setup(t)
	srv, _ := w.Replica(t, "a").Face(t, tokens+"acme-token-0123456789 operator acmeops tenant=acme\n", agentproc.FaceOptions{})
	tenantOf := func(thread string) any {
		t.Helper()
		code, view := getJSON(t, srv.URL+"/v1/conversations/"+thread, "viewer-token-0123456789")
		if code != http.StatusOK {
			t.Fatalf("view %s: %d %v", thread, code, view)
		}
		return view["tenant"]
	}
	acme, other := protocol.NewID(), protocol.NewID()
	if _, code, body := post(t, srv.URL, "acme-token-0123456789", input(acme, "r1", "hello")); code != http.StatusOK {
		t.Fatalf("the bound token's run: %d %s", code, body)
	}
	if got := tenantOf(acme); got != "acme" {
		t.Errorf("the bound token's thread: tenant %v, want acme", got)
	}
	if _, code, body := post(t, srv.URL, "operator-token-0123456789", input(other, "r1", "hello")); code != http.StatusOK {
		t.Fatalf("an unbound token's run: %d %s", code, body)
	}
	if got := tenantOf(other); got != nil {
		t.Errorf("an unbound token's thread: tenant %v, want none", got)
	}
	if _, code, body := post(t, srv.URL, "acme-token-0123456789", input(other, "r2", "more")); code != http.StatusForbidden || !strings.Contains(body, "wrong_tenant") {
		t.Errorf("the bound token on another tenant's thread: %d %s", code, body)
	}
}

// getJSON GETs url with token and decodes its JSON answer.
func getJSON(t *testing.T, url, token string) (int, map[string]any) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var m map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&m); err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, m
}
