package a2aface_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/offload-dev/offload/internal/a2atest"
	"github.com/offload-dev/offload/internal/offloadtest"
	"github.com/offload-dev/offload/pkg/agentproc"
	"github.com/offload-dev/offload/pkg/message"
	"github.com/offload-dev/offload/pkg/natsjs/serve/servetest"
	"github.com/offload-dev/offload/pkg/protocol"
	"github.com/offload-dev/offload/pkg/session"
)

// The tokens of the tests: a client's token given the roles that start
// runs and settle their input (admin, as the tests name it, though it is
// no admin), an operator (starts runs, may not approve), an admin.
const (
	tokens  = "admin-token-0123456789abc operator,approver,answerer alice\noperator-token-0123456789 operator ops-team\nother-token-0123456789abc admin mallory\n"
	admin   = "admin-token-0123456789abc"
	oper    = "operator-token-0123456789"
	another = "other-token-0123456789abc"
)

// TestClientTwoReplicas drives two agent serve replicas with the A2A JS
// client: a message to the first pauses on an approval
// (TASK_STATE_INPUT_REQUIRED, the call in the status message's data
// part); the decision, sent as a data part to the second, completes the
// task (TASK_STATE_COMPLETED, the output an artifact) and the tool ran
// once; the same decision again changes nothing.
func TestClientTwoReplicas(t *testing.T) {
	a2atest.Script(t)
	w := servetest.Setup(t)
	a, b := w.Replica(t, "a"), w.Replica(t, "b")
	srvA, _ := a.Face(t, tokens, agentproc.FaceOptions{A2A: true})
	srvB, _ := b.Face(t, tokens, agentproc.FaceOptions{A2A: true})
	ctx := t.Context() // each request bounded by a2atest.Do

	res := a2atest.Do(ctx, t, a2atest.Request{URL: srvA.URL + "/a2a/ops/", Token: admin, Op: "send", Text: "deploy web", MessageID: "msg-web-1"})
	task := res.Task()
	if res.Error != "" || a2atest.State(task) != "TASK_STATE_INPUT_REQUIRED" {
		t.Fatalf("send: %q %v", res.Error, res.Result)
	}
	// The same message again (a client's retry), to the other replica:
	// the same task, no second turn.
	again := a2atest.Do(ctx, t, a2atest.Request{URL: srvB.URL + "/a2a/ops/", Token: admin, Op: "send", Text: "deploy web", MessageID: "msg-web-1"})
	if again.Error != "" || again.Task()["id"] != task["id"] || a2atest.State(again.Task()) != "TASK_STATE_INPUT_REQUIRED" {
		t.Fatalf("the message again: %q %v", again.Error, again.Result)
	}
	pend := pendingOf(t, task)
	if len(pend) != 1 || pend[0]["tool"] != "deploy" || pend[0]["kind"] != "approval" || pend[0]["args_digest"] == "" {
		t.Fatalf("pending: %v", pend)
	}
	id, ctxID := task["id"].(string), task["contextId"].(string)

	decision := map[string]any{"decisions": []any{map[string]any{"task_id": pend[0]["task_id"], "approved": true, "args_digest": pend[0]["args_digest"]}}}
	res = a2atest.Do(ctx, t, a2atest.Request{URL: srvB.URL + "/a2a/ops/", Token: admin, Op: "send", TaskID: id, ContextID: ctxID, Data: decision})
	task = res.Task()
	if res.Error != "" || a2atest.State(task) != "TASK_STATE_COMPLETED" || !strings.Contains(output(task), "done deployed web") {
		t.Fatalf("decision: %q %v", res.Error, res.Result)
	}
	if n := deploys(w, "web"); n != 1 {
		t.Fatalf("deploys: %d, want 1", n)
	}
	res = a2atest.Do(ctx, t, a2atest.Request{URL: srvA.URL + "/a2a/ops/", Token: admin, Op: "get", TaskID: id})
	if res.Error != "" || a2atest.State(res.Task()) != "TASK_STATE_COMPLETED" {
		t.Fatalf("get: %q %v", res.Error, res.Result)
	}
	// The decision is in the history as the inbox's are: by the token's
	// name, channel a2a.
	if by, channel := decisionOf(t, a, ctxID); by != "alice" || channel != protocol.ChannelA2A {
		t.Fatalf("the decision recorded: by %q, channel %q", by, channel)
	}
	// The same decision again: the task has ended, nothing runs again.
	res = a2atest.Do(ctx, t, a2atest.Request{URL: srvA.URL + "/a2a/ops/", Token: admin, Op: "send", TaskID: id, Data: decision})
	if res.Error == "" || deploys(w, "web") != 1 {
		t.Fatalf("decision again: %q %v, deploys %d", res.Error, res.Result, deploys(w, "web"))
	}
}

// TestDecidedElsewhere: a call the task waits for, decided over the API
// (the desk of the other replica, channel api): the task completes
// without being asked, and a decision for it sent as A2A input
// meanwhile is skipped, not run twice.
func TestDecidedElsewhere(t *testing.T) {
	a2atest.Script(t)
	w := servetest.Setup(t)
	a, b := w.Replica(t, "a"), w.Replica(t, "b")
	srvA, _ := a.Face(t, tokens, agentproc.FaceOptions{A2A: true})
	_, faceB := b.Face(t, tokens, agentproc.FaceOptions{A2A: true})
	ctx := t.Context() // each request bounded by a2atest.Do

	res := a2atest.Do(ctx, t, a2atest.Request{URL: srvA.URL + "/a2a/ops/", Token: admin, Op: "send", Text: "deploy edge"})
	task := res.Task()
	if res.Error != "" || a2atest.State(task) != "TASK_STATE_INPUT_REQUIRED" {
		t.Fatalf("send: %q %v", res.Error, res.Result)
	}
	id, conv, call := task["id"].(string), task["contextId"].(string), pendingOf(t, task)[0]["task_id"].(string)
	if _, err := faceB.Desk.Decide(ctx, conv, call, protocol.Decision{Approved: true, By: "bob", Channel: protocol.ChannelAPI}); err != nil {
		t.Fatal(err)
	}
	decision := map[string]any{"decisions": []any{map[string]any{"task_id": call, "approved": true}}}
	res = a2atest.Do(ctx, t, a2atest.Request{URL: srvA.URL + "/a2a/ops/", Token: admin, Op: "send", TaskID: id, Data: decision})
	if res.Error != "" && !strings.Contains(res.Error, "TASK_STATE_COMPLETED") {
		t.Fatalf("the decision made elsewhere, sent again: %q", res.Error)
	}
	servetest.Finished(t, a, conv, "done deployed edge")
	res = a2atest.Do(ctx, t, a2atest.Request{URL: srvA.URL + "/a2a/ops/", Token: admin, Op: "get", TaskID: id})
	if res.Error != "" || a2atest.State(res.Task()) != "TASK_STATE_COMPLETED" || output(res.Task()) != "done deployed edge" {
		t.Fatalf("get: %q %v", res.Error, res.Result)
	}
	if n := deploys(w, "edge"); n != 1 {
		t.Fatalf("deploys: %d, want 1", n)
	}
	if by, channel := decisionOf(t, a, conv); by != "bob" || channel != protocol.ChannelAPI {
		t.Fatalf("the decision recorded: by %q, channel %q", by, channel)
	}
}

// decisionOf returns who decided conversation conv's call and through
// which channel, as its history records it.
func decisionOf(t *testing.T, r *servetest.Replica, conv string) (by, channel string) {
	t.Helper()
	st, err := r.Svc.State(t.Context(), conv)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range st.History {
		for _, p := range m.Parts {
			if tr, ok := p.(message.ToolReturn); ok {
				if note, ok := tr.Metadata[session.DecisionMetaKey].(map[string]any); ok {
					by, _ = note["by"].(string)
					channel, _ = note["channel"].(string)
				}
			}
		}
	}
	return by, channel
}

// pendingOf is the pending calls of task's status message's data part.
func pendingOf(t *testing.T, task map[string]any) []map[string]any {
	t.Helper()
	st, _ := task["status"].(map[string]any)
	msg, _ := st["message"].(map[string]any)
	parts, _ := msg["parts"].([]any)
	for _, p := range parts {
		pm, _ := p.(map[string]any)
		data, ok := pm["data"].(map[string]any)
		if !ok {
			continue
		}
		list, _ := data["pending"].([]any)
		var out []map[string]any
		for _, c := range list {
			cm, _ := c.(map[string]any)
			out = append(out, cm)
		}
		return out
	}
	t.Fatalf("no data part in the status message: %v", st)
	return nil
}

// output is the text of task's output artifact.
func output(task map[string]any) string {
	arts, _ := task["artifacts"].([]any)
	for _, a := range arts {
		am, _ := a.(map[string]any)
		parts, _ := am["parts"].([]any)
		for _, p := range parts {
			pm, _ := p.(map[string]any)
			if s, ok := pm["text"].(string); ok {
				return s
			}
		}
	}
	return ""
}

// deploys is how many times deploy ran for target.
func deploys(w *servetest.World, target string) int {
	w.Mu.Lock()
	defer w.Mu.Unlock()
	return w.Deploys[target]
}

// TestClientTokens: without a token the card is public and a request is
// 401; another token's task is not found (and not listed); an operator's
// decision is refused with the pending call still listed and nothing
// run.
func TestClientTokens(t *testing.T) {
	a2atest.Script(t)
	w := servetest.Setup(t)
	a, b := w.Replica(t, "a"), w.Replica(t, "b")
	srvA, _ := a.Face(t, tokens, agentproc.FaceOptions{A2A: true})
	srvB, _ := b.Face(t, tokens, agentproc.FaceOptions{A2A: true})
	ctx := t.Context() // each request bounded by a2atest.Do

	card := a2atest.Do(ctx, t, a2atest.Request{URL: srvA.URL + "/a2a/ops/", Op: "card"})
	if card.Error != "" || card.Result["name"] != "ops" {
		t.Fatalf("card without a token: %q %v", card.Error, card.Result)
	}
	res := a2atest.Do(ctx, t, a2atest.Request{URL: srvA.URL + "/a2a/ops/", Op: "send", Text: "deploy web"})
	if !strings.Contains(res.Error, "401") {
		t.Fatalf("send without a token: %q %v", res.Error, res.Result)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, srvB.URL+"/a2a/ops", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"ListTasks","params":{}}`))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("POST /a2a/ops without a token: %s", resp.Status)
	}

	res = a2atest.Do(ctx, t, a2atest.Request{URL: srvA.URL + "/a2a/ops/", Token: oper, Op: "send", Text: "deploy db"})
	task := res.Task()
	if res.Error != "" || a2atest.State(task) != "TASK_STATE_INPUT_REQUIRED" {
		t.Fatalf("operator's send: %q %v", res.Error, res.Result)
	}
	id, pend := task["id"].(string), pendingOf(t, task)
	for _, tok := range []string{another, admin} {
		res = a2atest.Do(ctx, t, a2atest.Request{URL: srvB.URL + "/a2a/ops/", Token: tok, Op: "get", TaskID: id})
		if res.Error == "" || !strings.Contains(strings.ToLower(res.Error), "not found") {
			t.Fatalf("another token's get: %q %v", res.Error, res.Result)
		}
		res = a2atest.Do(ctx, t, a2atest.Request{URL: srvB.URL + "/a2a/ops/", Token: tok, Op: "list"})
		if res.Error != "" || len(tasksOf(res)) != 0 {
			t.Fatalf("another token's list: %q %v", res.Error, res.Result)
		}
	}
	decision := map[string]any{"decisions": []any{map[string]any{"task_id": pend[0]["task_id"], "approved": true}}}
	res = a2atest.Do(ctx, t, a2atest.Request{URL: srvB.URL + "/a2a/ops/", Token: oper, Op: "send", TaskID: id, Data: decision})
	if res.Error == "" || !strings.Contains(res.Error, "only an approver") {
		t.Fatalf("operator's decision: %q %v", res.Error, res.Result)
	}
	res = a2atest.Do(ctx, t, a2atest.Request{URL: srvB.URL + "/a2a/ops/", Token: oper, Op: "get", TaskID: id})
	if res.Error != "" || a2atest.State(res.Task()) != "TASK_STATE_INPUT_REQUIRED" || len(pendingOf(t, res.Task())) != 1 {
		t.Fatalf("after the refused decision: %q %v", res.Error, res.Result)
	}
	res = a2atest.Do(ctx, t, a2atest.Request{URL: srvA.URL + "/a2a/ops/", Token: oper, Op: "list"})
	if got := tasksOf(res); res.Error != "" || len(got) != 1 || got[0]["id"] != id {
		t.Fatalf("operator's list: %q %v", res.Error, res.Result)
	}
	if n := deploys(w, "db"); n != 0 {
		t.Fatalf("deploys after a refused decision: %d", n)
	}
}

// TestClientStreams: a streamed message shows the task, WORKING, then
// INPUT_REQUIRED; the streamed decision (to the other replica) shows
// WORKING, the output artifact and COMPLETED. A subscriber on the other
// replica of a task that works sees it end; a cancelled task is CANCELED
// on both.
func TestClientStreams(t *testing.T) {
	a2atest.Script(t)
	w := servetest.Setup(t)
	a, b := w.Replica(t, "a"), w.Replica(t, "b")
	srvA, _ := a.Face(t, tokens, agentproc.FaceOptions{A2A: true})
	srvB, _ := b.Face(t, tokens, agentproc.FaceOptions{A2A: true})
	ctx := t.Context() // each request bounded by a2atest.Do

	res := a2atest.Do(ctx, t, a2atest.Request{URL: srvA.URL + "/a2a/ops/", Token: admin, Op: "stream", Text: "deploy api"})
	evs := res.Events()
	if res.Error != "" || len(evs) < 3 || kinds(evs) != "task statusUpdate statusUpdate" ||
		stateOf(evs[1]) != "TASK_STATE_WORKING" || stateOf(evs[2]) != "TASK_STATE_INPUT_REQUIRED" {
		t.Fatalf("stream: %q %s %v", res.Error, kinds(evs), evs)
	}
	task, _ := evs[0]["task"].(map[string]any)
	up, _ := evs[2]["statusUpdate"].(map[string]any)
	pend := pendingOf(t, up)
	decision := map[string]any{"decisions": []any{map[string]any{"task_id": pend[0]["task_id"], "approved": true}}}
	res = a2atest.Do(ctx, t, a2atest.Request{URL: srvB.URL + "/a2a/ops/", Token: admin, Op: "stream", TaskID: task["id"].(string), Data: decision})
	evs = res.Events()
	if res.Error != "" || kinds(evs) != "task statusUpdate artifactUpdate statusUpdate" || stateOf(evs[3]) != "TASK_STATE_COMPLETED" {
		t.Fatalf("streamed decision: %q %s %v", res.Error, kinds(evs), evs)
	}
	art, _ := evs[2]["artifactUpdate"].(map[string]any)
	if out := output(map[string]any{"artifacts": []any{art["artifact"]}}); !strings.Contains(out, "done deployed api") {
		t.Fatalf("artifact: %v", art)
	}

	// A task that works (slow waits for the gate), subscribed to on the
	// other replica: the subscriber sees it work, then end.
	res = a2atest.Do(ctx, t, a2atest.Request{URL: srvA.URL + "/a2a/ops/", Token: admin, Op: "send", Text: "slow s1", ReturnImmediately: true})
	if res.Error != "" || a2atest.State(res.Task()) != "TASK_STATE_WORKING" {
		t.Fatalf("returnImmediately: %q %v", res.Error, res.Result)
	}
	id := res.Task()["id"].(string)
	<-w.SlowStarted
	sub := a2atest.Start(ctx, t, a2atest.Request{URL: srvB.URL + "/a2a/ops/", Token: admin, Op: "subscribe", TaskID: id})
	first, ok := sub.Next()
	if !ok || a2atest.State(first["task"].(map[string]any)) != "TASK_STATE_WORKING" {
		t.Fatalf("subscribe: first %v", first)
	}
	close(w.SlowGate)
	res = sub.Wait(t)
	evs = res.Events()
	if res.Error != "" || kinds(evs) != "task artifactUpdate statusUpdate" || stateOf(evs[2]) != "TASK_STATE_COMPLETED" {
		t.Fatalf("subscribe: %q %s %v", res.Error, kinds(evs), evs)
	}
	res = a2atest.Do(ctx, t, a2atest.Request{URL: srvB.URL + "/a2a/ops/", Token: admin, Op: "subscribe", TaskID: id})
	if res.Error == "" {
		t.Fatalf("subscribe to a completed task: %v", res.Result)
	}

	// Cancel: a task that waits for input, cancelled on the other replica.
	res = a2atest.Do(ctx, t, a2atest.Request{URL: srvA.URL + "/a2a/ops/", Token: admin, Op: "send", Text: "deploy cache"})
	id = res.Task()["id"].(string)
	res = a2atest.Do(ctx, t, a2atest.Request{URL: srvB.URL + "/a2a/ops/", Token: admin, Op: "cancel", TaskID: id})
	if res.Error != "" || a2atest.State(res.Task()) != "TASK_STATE_CANCELED" {
		t.Fatalf("cancel: %q %v", res.Error, res.Result)
	}
	res = a2atest.Do(ctx, t, a2atest.Request{URL: srvA.URL + "/a2a/ops/", Token: admin, Op: "get", TaskID: id})
	if res.Error != "" || a2atest.State(res.Task()) != "TASK_STATE_CANCELED" {
		t.Fatalf("get after cancel: %q %v", res.Error, res.Result)
	}
	res = a2atest.Do(ctx, t, a2atest.Request{URL: srvA.URL + "/a2a/ops/", Token: admin, Op: "list"})
	states := map[string]int{}
	for _, tk := range tasksOf(res) {
		states[a2atest.State(tk)]++
	}
	if res.Error != "" || states["TASK_STATE_COMPLETED"] != 2 || states["TASK_STATE_CANCELED"] != 1 {
		t.Fatalf("list: %q %v", res.Error, states)
	}
}

// kinds lists the kinds of stream events (task, statusUpdate, …).
func kinds(evs []map[string]any) string {
	var out []string
	for _, e := range evs {
		for k := range e {
			out = append(out, k)
		}
	}
	return strings.Join(out, " ")
}

// stateOf is the state of a stream event's task or status update.
func stateOf(ev map[string]any) string {
	for _, k := range []string{"task", "statusUpdate"} {
		if m, ok := ev[k].(map[string]any); ok {
			return a2atest.State(m)
		}
	}
	return ""
}

// tasksOf is the tasks of a list's result.
func tasksOf(r *a2atest.Result) []map[string]any {
	list, _ := r.Result["tasks"].([]any)
	var out []map[string]any
	for _, x := range list {
		m, _ := x.(map[string]any)
		out = append(out, m)
	}
	return out
}

// TestClientCancelAndFail: a task that works (its tool runs), cancelled
// on the other replica, is CANCELED there and on the first, its run
// interrupted; a turn whose model fails is FAILED, saying why.
func TestClientCancelAndFail(t *testing.T) {
	a2atest.Script(t)
	w := servetest.Setup(t)
	a, b := w.Replica(t, "a"), w.Replica(t, "b")
	srvA, _ := a.Face(t, tokens, agentproc.FaceOptions{A2A: true})
	srvB, _ := b.Face(t, tokens, agentproc.FaceOptions{A2A: true})
	ctx := t.Context() // each request bounded by a2atest.Do

	res := a2atest.Do(ctx, t, a2atest.Request{URL: srvA.URL + "/a2a/ops/", Token: admin, Op: "send", Text: "slow s5", ReturnImmediately: true})
	if res.Error != "" || a2atest.State(res.Task()) != "TASK_STATE_WORKING" {
		t.Fatalf("send: %q %v", res.Error, res.Result)
	}
	id, conv := res.Task()["id"].(string), res.Task()["contextId"].(string)
	<-w.SlowStarted
	res = a2atest.Do(ctx, t, a2atest.Request{URL: srvB.URL + "/a2a/ops/", Token: oper, Op: "cancel", TaskID: id})
	if res.Error == "" {
		t.Fatalf("another token's cancel: %v", res.Result)
	}
	res = a2atest.Do(ctx, t, a2atest.Request{URL: srvB.URL + "/a2a/ops/", Token: admin, Op: "cancel", TaskID: id})
	if res.Error != "" || a2atest.State(res.Task()) != "TASK_STATE_CANCELED" {
		t.Fatalf("cancel: %q %v", res.Error, res.Result)
	}
	offloadtest.Eventually(t, "the run interrupted", func() error {
		c, err := a.Svc.Get(t.Context(), conv)
		if err != nil {
			return err
		}
		if c.Status != "failed" {
			return fmt.Errorf("%+v", c)
		}
		return nil
	})
	res = a2atest.Do(ctx, t, a2atest.Request{URL: srvA.URL + "/a2a/ops/", Token: admin, Op: "get", TaskID: id})
	if res.Error != "" || a2atest.State(res.Task()) != "TASK_STATE_CANCELED" {
		t.Fatalf("get after the cancel: %q %v", res.Error, res.Result)
	}

	res = a2atest.Do(ctx, t, a2atest.Request{URL: srvA.URL + "/a2a/ops/", Token: admin, Op: "send", Text: "fail now"})
	task := res.Task()
	st, _ := task["status"].(map[string]any)
	if res.Error != "" || a2atest.State(task) != "TASK_STATE_FAILED" || !strings.Contains(fmt.Sprint(st["message"]), "the model is down") {
		t.Fatalf("a failing turn: %q %v", res.Error, res.Result)
	}
}

// TestLargeInputKeepsTheTask: messages to a task whose data parts are
// large (600 KiB each: more than one value of the store holds, put
// together) settle its calls; the task's history keeps them as a note.
func TestLargeInputKeepsTheTask(t *testing.T) {
	a2atest.Script(t)
	w := servetest.Setup(t)
	a := w.Replica(t, "a")
	srvA, _ := a.Face(t, tokens, agentproc.FaceOptions{A2A: true})
	ctx := t.Context()

	res := a2atest.Do(ctx, t, a2atest.Request{URL: srvA.URL + "/a2a/ops/", Token: admin, Op: "send", Text: "deploys big1 big2"})
	task := res.Task()
	pend := pendingOf(t, task)
	if res.Error != "" || a2atest.State(task) != "TASK_STATE_INPUT_REQUIRED" || len(pend) != 2 {
		t.Fatalf("send: %q %v", res.Error, res.Result)
	}
	pad := strings.Repeat("x", 600<<10)
	for i, c := range pend {
		data := map[string]any{"decisions": []any{map[string]any{"task_id": c["task_id"], "approved": true}}, "note": pad}
		res = a2atest.Do(ctx, t, a2atest.Request{URL: srvA.URL + "/a2a/ops/", Token: admin, Op: "send", TaskID: task["id"].(string),
			Data: data, ReturnImmediately: i == 0})
		if res.Error != "" {
			t.Fatalf("decision %d: %q", i, res.Error)
		}
	}
	if a2atest.State(res.Task()) != "TASK_STATE_COMPLETED" {
		t.Fatalf("after the decisions: %v", res.Result)
	}
	history, _ := res.Task()["history"].([]any)
	if len(history) != 3 || !strings.Contains(fmt.Sprint(history[2]), "not kept in the task's history") {
		t.Fatalf("history: %d messages", len(history))
	}
}
