package a2aface_test

import (
	"context"
	"strings"
	"testing"

	"github.com/offload-dev/offload/internal/a2atest"
	"github.com/offload-dev/offload/pkg/agentproc"
	"github.com/offload-dev/offload/pkg/natsjs/serve/servetest"
)

// The tokens of the tests: an admin (starts runs and settles their
// input), an operator (starts runs, may not approve), another admin.
const (
	tokens  = "admin-token-0123456789abc admin alice\noperator-token-0123456789 operator ops-team\nother-token-0123456789abc admin mallory\n"
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
	ctx, cancel := context.WithTimeout(t.Context(), 2*servetest.Wait)
	defer cancel()

	res := a2atest.Do(ctx, t, a2atest.Request{URL: srvA.URL + "/a2a/ops/", Token: admin, Op: "send", Text: "deploy web"})
	task := res.Task()
	if res.Error != "" || a2atest.State(task) != "TASK_STATE_INPUT_REQUIRED" {
		t.Fatalf("send: %q %v", res.Error, res.Result)
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
