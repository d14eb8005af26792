package web_test

import (
	"context"
	"testing"
	"time"

	"github.com/offload-dev/offload/internal/offloadtest"
	"github.com/offload-dev/offload/pkg/agentproc"
	"github.com/offload-dev/offload/pkg/natsjs/serve/servetest"
	"github.com/offload-dev/offload/pkg/natsjs/worker"
	"github.com/offload-dev/offload/pkg/protocol"
	"github.com/offload-dev/offload/pkg/tool"
)

// A call held in its tool's queue is listed as queued beside the pending
// calls (SPEC §19): GET /v1/pending answers it under queued, kind queued,
// with its tool, tenant and reason (the tool paused), and ?kind=queued
// selects it alone; it is no pending call to decide.
func TestPendingListsQueued(t *testing.T) {
	b := servetest.Setup(t)
	r := b.Replica(t, "r1")
	srv, _ := r.Face(t, opToken+" operator ops\n"+viewerToken+" viewer val\n", agentproc.FaceOptions{})
	if code, m := call(t, srv, "POST", "/v1/tools/job/pause", opToken, ""); code != 200 {
		t.Fatalf("pause: %d %v", code, m)
	}
	job := tool.Func("job", "A job.", func(context.Context, *tool.RunContext, struct{}) (string, error) { return "done", nil })
	w, err := worker.New(worker.Config{Conn: b.Srv.Conn(t), ID: "w", Tools: []*tool.Tool{job}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = w.StopAndCancel(ctx)
	})
	task := protocol.Task{TaskID: protocol.NewID(), Tool: "job", Args: []byte(`{}`), ConversationID: protocol.NewID(), ToolCallID: "call_1", Tenant: "acme"}
	data, err := protocol.AppendTask(nil, &task)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Srv.JetStream(t).Publish(ctx, "tools.task.job", data); err != nil {
		t.Fatal(err)
	}
	var queued []any
	offloadtest.Eventually(t, "the call listed queued", func() bool {
		code, m := call(t, srv, "GET", "/v1/pending", viewerToken, "")
		queued, _ = m["queued"].([]any)
		return code == 200 && len(queued) == 1
	})
	q := queued[0].(map[string]any)
	if q["task_id"] != task.TaskID || q["conversation_id"] != task.ConversationID || q["kind"] != "queued" || q["tool"] != "job" ||
		q["tenant"] != "acme" || q["reason"] != "paused" {
		t.Errorf("queued %v", q)
	}
	code, m := call(t, srv, "GET", "/v1/pending?kind=queued", viewerToken, "")
	if pend, _ := m["pending"].([]any); code != 200 || len(pend) != 0 || len(m["queued"].([]any)) != 1 {
		t.Errorf("?kind=queued: %d %v", code, m)
	}
	code, m = call(t, srv, "GET", "/v1/pending?kind=approval", viewerToken, "")
	if code != 200 || len(m["queued"].([]any)) != 0 {
		t.Errorf("?kind=approval: %d %v", code, m)
	}
}
