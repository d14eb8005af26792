package remote_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/offload-dev/offload/internal/offloadtest"
	"github.com/offload-dev/offload/pkg/natsjs"
	"github.com/offload-dev/offload/pkg/natsjs/internal/jstest"
	"github.com/offload-dev/offload/pkg/natsjs/remote"
	"github.com/offload-dev/offload/pkg/natsjs/worker"
	"github.com/offload-dev/offload/pkg/protocol"
	"github.com/offload-dev/offload/pkg/tool"
)

// TestDispatchAgainAnsweredBefore is the chaos's stuck conversation at
// the dispatcher (SPEC §20, RELIABILITY.md "The chaos"): a process
// dispatched an approved call's attempt 1, its worker ran it and stored
// the result, and the process died before it stored the call's outcome;
// the nats-server restarted, so it no longer knows the task's ID (its
// workqueue message was acknowledged) and takes the continuation's
// publish of the same task and attempt as new. The worker finds the
// attempt answered in its ledger and acknowledges the task without
// running it or publishing anything: the continuation's call
// (DispatchAgain, as the toolset does for tool.RunContext.Again) is
// answered by the result stored for its attempt, and the tool ran once.
func TestDispatchAgainAnsweredBefore(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var runs atomic.Int32
	once := tool.Func("once", "Not idempotent.", func(context.Context, *tool.RunContext, struct{}) (string, error) {
		runs.Add(1)
		return "done", nil
	})
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()

	// The process that died, and the worker of then.
	w1 := b.worker(t, worker.Config{ID: "w1", Tools: []*tool.Tool{once}})
	d1, _ := b.dispatcher(t, remote.DispatcherConfig{})
	task := jstest.NewTask("once", protocol.NewID(), `{}`)
	task.Attempt, task.Approved = 1, true
	if res, err := d1.Call(ctx, task); err != nil || string(res.Content) != `"done"` {
		t.Fatalf("first dispatch: %+v, %v", res, err)
	}
	if err := d1.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if err := w1.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	b.srv.Restart(t)

	b.worker(t, worker.Config{ID: "w2", Tools: []*tool.Tool{once}})
	d2, _ := b.dispatcher(t, remote.DispatcherConfig{})
	tasks, err := b.srv.JetStream(t).Stream(ctx, "TOOLS_TASKS")
	if err != nil {
		t.Fatal(err)
	}
	before := tasks.CachedInfo().State.LastSeq
	h, err := d2.DispatchAgain(ctx, task)
	if err != nil {
		t.Fatal(err)
	}
	info, err := tasks.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.LastSeq != before+1 {
		t.Fatalf("tasks stream at %d after the dispatch again, was %d: the server took it as a duplicate, not the case under test", info.State.LastSeq, before)
	}
	res, err := h.Wait(ctx)
	if err != nil || string(res.Content) != `"done"` || res.Attempt != 1 {
		t.Fatalf("dispatched again: %+v, %v; want the stored result of attempt 1", res, err)
	}
	if n := runs.Load(); n != 1 {
		t.Fatalf("the tool ran %d times, want once", n)
	}
}

// A background call a continuation starts again (tool.RunContext.Again)
// whose attempt's result was stored before (by the worker of the process
// that died) ends with that result, though no worker answers its task
// again.
func TestBackgroundCallDispatchedAgainReadsTheStoredResult(t *testing.T) {
	t.Parallel()
	b := setup(t)
	entry := natsjs.RegistryEntry{Name: "done", Parameters: json.RawMessage(`{"type":"object","properties":{}}`), Worker: "w-gone",
		ExpiresAt: time.Now().Add(natsjs.RegistryTTL)}
	data, _ := json.Marshal(entry)
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	// The process that died: its dispatcher made the streams, its worker
	// stored the result.
	gone, _ := b.dispatcher(t, remote.DispatcherConfig{})
	if err := gone.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	conv, taskID := protocol.NewID(), protocol.NewID()
	if _, err := b.js.Publish(ctx, protocol.Subjects{}.Result(conv, taskID, "done"), []byte(`{"content":"42","attempt":0}`)); err != nil {
		t.Fatal(err)
	}

	d, _ := b.dispatcher(t, remote.DispatcherConfig{})
	ts := b.toolset(t, d, nil)
	if _, err := b.registry(t).Put(ctx, "done.w-gone", data); err != nil {
		t.Fatal(err)
	}
	waitTools(t, ts, "done")
	call := bgCall(t, ts, "done", conv)
	call.TaskID = taskID
	call.Call.RunContext.Again = true
	task, err := ts.Executor(nil).Start(ctx, call)
	if err != nil {
		t.Fatal(err)
	}
	offloadtest.WaitOrTimeout(t, task.Done(), "the call answered by the stored result")
	if v, err := task.Outcome(); err != nil || !strings.Contains(fmt.Sprintf("%s", v), `"42"`) {
		t.Fatalf("outcome %s, %v; want the stored result", v, err)
	}
}
