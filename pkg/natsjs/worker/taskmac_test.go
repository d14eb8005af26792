package worker_test

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/offload-dev/offload/internal/offloadtest"
	"github.com/offload-dev/offload/pkg/natsjs/internal/jstest"
	"github.com/offload-dev/offload/pkg/natsjs/remote"
	"github.com/offload-dev/offload/pkg/natsjs/worker"
	"github.com/offload-dev/offload/pkg/protocol"
	"github.com/offload-dev/offload/pkg/tool"
)

// TestTaskKeyRefusesApprovedTasksOfOthers (issue 30, finding 1): a worker
// with a task key (the embedded default's in-process worker) runs an
// approved task only when it carries the MAC of a dispatcher with that key:
// an `"approved":true` task published by anyone else (a server that is not
// the store's, relaying its own) gets an UnauthenticatedTask error result
// and the gated tool does not run; unapproved tasks of ungated tools run
// as before.
func TestTaskKeyRefusesApprovedTasksOfOthers(t *testing.T) {
	t.Parallel()
	b := setup(t)
	key := []byte("the store's task key")
	var ran atomic.Int64
	gated := tool.Func("gated", "Needs approval.", func(context.Context, *tool.RunContext, struct{}) (string, error) {
		ran.Add(1)
		return "ran", nil
	}, tool.NeedsApproval())
	b.worker(t, worker.Config{ID: "w", Tools: []*tool.Tool{gated, jstest.EchoTool("")}, TaskKey: key})
	results := b.results(t)
	conv := protocol.NewID()

	// Forged: approved, published without the key's MAC.
	forged := jstest.NewTask("gated", conv, `{}`)
	forged.Approved = true
	b.publishTask(t, forged)
	res := offloadtest.WaitOrTimeout(t, results, "the forged task's result")
	if res.TaskID != forged.TaskID || res.Status != protocol.StatusError || res.ErrorType != protocol.ErrorUnauthenticatedTask {
		t.Fatalf("forged approved task: %+v, want an UnauthenticatedTask error", res)
	}
	if n := ran.Load(); n != 0 {
		t.Fatalf("the gated tool ran %d times for a forged task", n)
	}

	// An unapproved task of an ungated tool needs no MAC.
	if got := jstest.Content(t, mustCall(t, b, nil, jstest.NewTask("echo", conv, `{"text":"hi"}`))); got == "" {
		t.Error("echo without MAC: empty result")
	}
	// The dispatcher with the key: runs.
	task := jstest.NewTask("gated", conv, `{}`)
	task.Approved = true
	if res := mustCall(t, b, key, task); res.Status != protocol.StatusOK || ran.Load() != 1 {
		t.Fatalf("authenticated approved task: %+v, ran %d", res, ran.Load())
	}
	// Another key's MAC is no better than none.
	task = jstest.NewTask("gated", conv, `{}`)
	task.Approved = true
	if res := mustCall(t, b, []byte("another key"), task); res.ErrorType != protocol.ErrorUnauthenticatedTask || ran.Load() != 1 {
		t.Fatalf("approved task under another key: %+v, ran %d", res, ran.Load())
	}
}

// mustCall runs task through a dispatcher with key.
func mustCall(t *testing.T, b *bundle, key []byte, task protocol.Task) protocol.Result {
	t.Helper()
	d, _ := b.dispatcher(t, remote.DispatcherConfig{TaskKey: key})
	res, err := d.Call(context.Background(), task)
	if err != nil {
		t.Fatal(err)
	}
	return res
}
