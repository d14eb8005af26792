package remote_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/offload-dev/offload/internal/offloadtest"
	"github.com/offload-dev/offload/pkg/agent"
	"github.com/offload-dev/offload/pkg/agent/background"
	"github.com/offload-dev/offload/pkg/message"
	"github.com/offload-dev/offload/pkg/natsjs"
	"github.com/offload-dev/offload/pkg/natsjs/internal/jstest"
	"github.com/offload-dev/offload/pkg/natsjs/remote"
	"github.com/offload-dev/offload/pkg/natsjs/worker"
	"github.com/offload-dev/offload/pkg/progress"
	"github.com/offload-dev/offload/pkg/protocol"
	"github.com/offload-dev/offload/pkg/tool"
)

// bgCall builds the BackgroundCall the capability would hand the executor.
func bgCall(t *testing.T, r *remote.Toolset, name, conv string) *background.Call {
	t.Helper()
	tools, err := r.Tools(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var def *tool.Tool
	for _, x := range tools {
		if x.Name == name {
			def = x
		}
	}
	if def == nil {
		t.Fatalf("no remote tool %s", name)
	}
	id := "call_" + protocol.NewID()
	return &background.Call{
		TaskID: protocol.NewID(),
		Call: &agent.ToolCall{
			Tool:       def,
			Call:       message.ToolCall{ToolName: name, ToolCallID: id, Args: "{}"},
			Args:       json.RawMessage(`{}`),
			RunContext: &tool.RunContext{RunID: protocol.NewID(), ConversationID: conv, ToolCallID: id, ToolName: name},
		},
		Run: func(context.Context, *agent.ToolCall) (any, error) {
			t.Error("a remote tool ran in process")
			return nil, nil
		},
	}
}

// progressTo is a progress reporter that forwards task reports.
type progressTo chan string

func (p progressTo) Report(msg string, _ *float64) { p <- msg }
func (p progressTo) ReportTask(task, msg string, _ *float64) {
	p <- task + " " + msg
}

func TestRemoteExecutor(t *testing.T) {
	t.Parallel()
	b := setup(t)
	g := jstest.NewGate()
	reporting := tool.Func("reporting", "Report, then wait.", func(ctx context.Context, rc *tool.RunContext, _ struct{}) (string, error) {
		progress.Report(ctx, "working", nil)
		if _, err := g.Tool("inner", "done").Run(ctx, rc, json.RawMessage(`{}`)); err != nil {
			return "", err
		}
		return "done", nil
	})
	b.worker(t, worker.Config{ID: "bg-1", Tools: []*tool.Tool{reporting, g.Tool("gated", "never")}})
	d, am := b.dispatcher(t, remote.DispatcherConfig{})
	ts := b.toolset(t, d, nil)
	waitTools(t, ts, "gated", "reporting")
	local := &fakeExecutor{started: make(chan string, 1)}
	ex := ts.Executor(local)
	conv := protocol.NewID()
	reports := make(progressTo, 8)
	ctx := progress.WithReporter(context.Background(), reports)

	// A remote tool runs on the worker with the call's task ID, mode
	// background; its progress carries the task ID.
	call := bgCall(t, ts, "reporting", conv)
	task, err := ex.Start(ctx, call)
	if err != nil {
		t.Fatal(err)
	}
	if got := offloadtest.WaitOrTimeout(t, reports, "a progress report"); got != call.TaskID+" working" {
		t.Errorf("progress %q", got)
	}
	offloadtest.WaitOrTimeout(t, g.Started, "the tool to start")
	g.Open()
	offloadtest.WaitOrTimeout(t, task.Done(), "the task to finish")
	v, err := task.Outcome()
	if ret, ok := v.(tool.Return); err != nil || !ok || string(ret.Value.(json.RawMessage)) != `"done"` {
		t.Fatalf("outcome %#v, %v", v, err)
	}
	if got := testutil.ToFloat64(am.ToolCallsTotal.WithLabelValues("reporting", "background", "ok")); got != 1 {
		t.Errorf("tool_calls_total{reporting,background,ok} = %v", got)
	}

	// A tool no worker serves goes to the fallback.
	other := bgCall(t, ts, "gated", conv)
	other.Call.Call.ToolName = "local_only"
	if _, err := ex.Start(ctx, other); err != nil {
		t.Fatal(err)
	}
	if got := offloadtest.WaitOrTimeout(t, local.started, "the fallback"); got != other.TaskID {
		t.Errorf("fallback started %q", got)
	}
	if _, err := ts.Executor(nil).Start(ctx, other); !errors.Is(err, natsjs.ErrNotRemote) {
		t.Errorf("no fallback: %v", err)
	}
}

// Cancel reaches the worker, which stops the tool; Detach leaves the task
// running and its result in the stream.
func TestRemoteExecutorCancelAndDetach(t *testing.T) {
	t.Parallel()
	b := setup(t)
	g := jstest.NewGate()
	b.worker(t, worker.Config{ID: "bg-2", Tools: []*tool.Tool{g.Tool("gated", "finished")}})
	d, _ := b.dispatcher(t, remote.DispatcherConfig{})
	ts := b.toolset(t, d, nil)
	waitTools(t, ts, "gated")
	ex := ts.Executor(nil)
	conv := protocol.NewID()
	ctx := context.Background()
	results := b.results(t)

	task, err := ex.Start(ctx, bgCall(t, ts, "gated", conv))
	if err != nil {
		t.Fatal(err)
	}
	offloadtest.WaitOrTimeout(t, g.Started, "the tool to start")
	task.Cancel("the run ended")
	offloadtest.WaitOrTimeout(t, task.Done(), "the cancelled task (confirmed by the worker)")
	var tc *tool.TaskCancelled
	if _, err := task.Outcome(); !errors.As(err, &tc) || tc.Reason != "the run ended" {
		t.Fatalf("cancelled outcome: %v", err)
	}
	offloadtest.WaitOrTimeout(t, g.CtxDone, "the worker to stop the tool")
	if res := offloadtest.WaitOrTimeout(t, results, "the worker's confirmation"); res.Status != protocol.StatusCancelled {
		t.Fatalf("worker answered %+v", res)
	}

	call := bgCall(t, ts, "gated", conv)
	task, err = ex.Start(ctx, call)
	if err != nil {
		t.Fatal(err)
	}
	offloadtest.WaitOrTimeout(t, g.Started, "the second tool to start")
	if !task.Detach() {
		t.Fatal("a remote task cannot be detached")
	}
	offloadtest.WaitOrTimeout(t, task.Done(), "the detached task")
	if _, err := task.Outcome(); !errors.Is(err, natsjs.ErrDetached) {
		t.Fatalf("detached outcome: %v", err)
	}
	g.Open()
	res := offloadtest.WaitOrTimeout(t, results, "the detached task's result")
	if res.TaskID != call.TaskID || jstest.Content(t, res) != "finished" {
		t.Fatalf("result %+v", res)
	}
}

// fakeExecutor records the calls it is asked to start.
type fakeExecutor struct{ started chan string }

func (f *fakeExecutor) Start(_ context.Context, c *background.Call) (agent.BackgroundTask, error) {
	f.started <- c.TaskID
	return nil, nil
}
