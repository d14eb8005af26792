package background_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/offload-dev/offload/internal/offloadtest"
	"github.com/offload-dev/offload/pkg/agent"
	"github.com/offload-dev/offload/pkg/agent/background"
	"github.com/offload-dev/offload/pkg/agent/bgtest"
	"github.com/offload-dev/offload/pkg/deferred"
	"github.com/offload-dev/offload/pkg/llm"
	"github.com/offload-dev/offload/pkg/message"
	"github.com/offload-dev/offload/pkg/tool"
)

// TestBackgroundScenarios runs the BackgroundTools scenario suite with the
// in-process executor.
func TestBackgroundScenarios(t *testing.T) {
	t.Parallel()
	bgtest.Run(t, bgtest.Harness{
		Name: "in-process",
		New: func(_ *testing.T, tools ...*tool.Tool) (tool.Toolset, background.Executor) {
			return tool.MustSet(tools...), background.InProcessExecutor{}
		},
	})
}

// detaching is an executor whose tasks can outlive the run (like a
// worker's): it runs them in goroutines that the test stops itself.
type detaching struct {
	mu    sync.Mutex
	tasks []agent.BackgroundTask
}

func (d *detaching) Start(ctx context.Context, call *background.Call) (agent.BackgroundTask, error) {
	t, err := background.InProcessExecutor{}.Start(ctx, call)
	if err != nil {
		return nil, err
	}
	d.mu.Lock()
	d.tasks = append(d.tasks, t)
	d.mu.Unlock()
	return detachable{t}, nil
}

// stop cancels every task and waits for them.
func (d *detaching) stop() {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, t := range d.tasks {
		t.Cancel("test over")
		<-t.Done()
	}
}

type detachable struct{ agent.BackgroundTask }

func (detachable) Detach() bool { return true }

func TestPauseKeepsDetachableTasksInThePendingRecord(t *testing.T) {
	t.Parallel()
	exec := &detaching{}
	defer exec.stop()
	started := make(chan struct{})
	slow := tool.Func("slow", "", func(ctx context.Context, _ *tool.RunContext, _ struct{}) (string, error) {
		close(started)
		<-ctx.Done()
		return "", ctx.Err()
	}, tool.Meta(map[string]any{"background": true}))
	waitStarted := agent.HandleDeferredToolCalls(func(ctx context.Context, _ *tool.RunContext, _ *deferred.Requests) (*deferred.Results, error) {
		offloadtest.WaitOrTimeout(t, started, "the task to start")
		return nil, nil
	})
	m := turns(calls(call("slow", "c1", `{}`), call("gated", "c2", `{"x":1}`)), text("never"))
	a := newAgentCfg(t, agent.Config{Model: m, AllowDeferred: true, Capabilities: []agent.Capability{
		background.Tools(background.Config{Executor: exec}), waitStarted,
	}}, slow, times42("gated", tool.NeedsApproval()))
	var final *agent.Final
	res, err := a.Run(t.Context(), "go", &agent.RunOptions{OnEvent: func(e agent.Event) {
		if e.Type == agent.EventFinal {
			final = e.Final
		}
	}})
	if err != nil || !res.Paused() {
		t.Fatalf("%v paused %v", err, res.Paused())
	}
	if len(res.Background) != 1 || res.Background[0].Tool != "slow" || res.Background[0].ToolCallID != "c1" || res.Background[0].StartedAt.IsZero() {
		t.Fatalf("background %+v", res.Background)
	}
	rec := res.PendingRecord()
	if rec.RunID != res.RunID || rec.ConversationID != res.ConversationID || len(rec.Tasks) != 2 || rec.Tasks[0].Kind != deferred.KindApproval || rec.Tasks[1].Kind != deferred.KindBackground {
		t.Fatalf("record %+v", rec)
	}
	b, err := json.Marshal(rec)
	if err != nil {
		t.Fatal(err)
	}
	var back deferred.PendingRecord
	if err := json.Unmarshal(b, &back); err != nil || !reflect.DeepEqual(&back, rec) {
		t.Fatalf("round trip %s: %+v %v", b, back, err)
	}
	if len(final.Pending) != 2 || final.Pending[1].Kind != deferred.KindBackground || final.Pending[1].TaskID != res.Background[0].TaskID || final.Status != agent.StatusPaused {
		t.Errorf("final pending %+v", final.Pending)
	}
	// The detached task still runs.
	select {
	case <-exec.tasks[0].Done():
		t.Error("the detached task was stopped")
	default:
	}
}

func TestSuspendStopsAtTheNextModelRequest(t *testing.T) {
	t.Parallel()
	suspend := make(chan struct{})
	stopper := tool.Func("t", "", func(_ context.Context, rc *tool.RunContext, _ struct{}) (string, error) {
		close(suspend) // SIGTERM arrives while the tool runs
		return "ran", rc.Enqueue(tool.PriorityASAP, message.TextContent("queued before the stop"))
	})
	m := turns(calls(call("t", "c1", `{}`)), text("continued"))
	a := newAgent(t, m, stopper)
	res, err := a.Run(t.Context(), "go", &agent.RunOptions{Suspend: suspend})
	if err != nil || !res.Suspended || agent.StatusOf(res, err) != agent.StatusPaused || len(m.Requests()) != 1 {
		t.Fatalf("%v suspended %v requests %d", err, res.Suspended, len(m.Requests()))
	}
	if rec := res.PendingRecord(); rec == nil || len(rec.Tasks) != 0 {
		t.Errorf("record %+v", rec)
	}
	// The history holds the tool's result: continuing it does not run the
	// tool again.
	res, err = a.Run(t.Context(), "", &agent.RunOptions{History: res.Messages})
	if err != nil || res.Output != "continued" {
		t.Fatalf("%v %q", err, res.Output)
	}
	if got := mustJSON(t, m.Requests()[1].Messages); !strings.Contains(got, "queued before the stop") || !strings.Contains(got, `"ran"`) {
		t.Errorf("the continued run lost what the suspended one produced: %s", got)
	}
}

// Scenario: test_constructs_from_agent_spec
func TestSelectorFromSpec(t *testing.T) {
	t.Parallel()
	mk := func(name string, md map[string]any) *tool.Tool {
		return tool.Func(name, "", func(context.Context, *tool.RunContext, struct{}) (string, error) { return "", nil }, tool.Meta(md))
	}
	a := mk("a", map[string]any{"background": true, "team": map[string]any{"name": "ops", "size": 3}})
	b := mk("b", map[string]any{"background": "optional"})
	c := mk("c", nil)
	var spec any
	if err := yaml.Unmarshal([]byte("{team: {name: ops}}"), &spec); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		spec any
		want string
	}{
		{nil, "a"},
		{"all", "abc"},
		{"b", "b"},
		{[]any{"a", "c"}, "ac"},
		{[]string{"c"}, "c"},
		{map[string]any{"background": "optional"}, "b"},
		{spec, "a"},
		{map[string]any{"team": "ops"}, ""},
	} {
		sel, err := background.SelectorFromSpec(tc.spec)
		if err != nil {
			t.Fatalf("%v: %v", tc.spec, err)
		}
		got := ""
		for _, x := range []*tool.Tool{a, b, c} {
			if sel.Matches(t.Context(), nil, x) {
				got += x.Name
			}
		}
		if got != tc.want {
			t.Errorf("%#v selects %q, want %q", tc.spec, got, tc.want)
		}
	}
	for _, bad := range []any{42, []any{"a", 1}} {
		if _, err := background.SelectorFromSpec(bad); !errors.Is(err, agent.ErrInvalidConfig) {
			t.Errorf("%v: err = %v", bad, err)
		}
	}
}

func TestApprovedBackgroundCallKeepsItsTaskID(t *testing.T) {
	t.Parallel()
	report := tool.Func("report", "", func(context.Context, *tool.RunContext, struct{}) (string, error) { return "reported", nil },
		tool.Meta(map[string]any{"background": true}), tool.NeedsApproval())
	m := model(func(n int, req *llm.Request) *llm.Response {
		switch {
		case n == 0:
			return calls(call("report", "c1", `{}`))
		case strings.Contains(mustJSON(t, req.Messages), "completed."):
			return text("done")
		default:
			return text("waiting")
		}
	})
	a := newAgentCfg(t, agent.Config{Model: m, AllowDeferred: true, Capabilities: []agent.Capability{background.Tools(background.Config{})}}, report)
	paused, err := a.Run(t.Context(), "go", nil)
	if err != nil || !paused.Paused() {
		t.Fatalf("%v", err)
	}
	id := paused.Deferred.TaskIDs["c1"]
	var started []string
	res, err := a.Run(t.Context(), "", &agent.RunOptions{History: paused.Messages, DeferredResults: &deferred.Results{Approvals: map[string]any{"c1": true}}, OnEvent: func(e agent.Event) {
		if e.Type == agent.EventBackgroundTaskStarted {
			started = append(started, e.TaskID)
		}
	}})
	if err != nil || res.Output != "done" {
		t.Fatalf("%v %q", err, res.Output)
	}
	if len(started) != 1 || started[0] != id {
		t.Errorf("background task %v, deferred task %s", started, id)
	}
}

// Reference §7.5: the idle wait for a live background task happens only
// when nothing is queued; a when_idle message enqueued while the task runs
// redirects the run at once, without waiting for the task.
func TestQueuedMessageIsNotHeldBehindALiveTask(t *testing.T) {
	t.Parallel()
	gate := make(chan struct{})
	slow := tool.Func("slow", "", func(ctx context.Context, _ *tool.RunContext, _ struct{}) (string, error) {
		select {
		case <-gate:
			return "slow result", nil
		case <-ctx.Done():
			return "", ctx.Err()
		}
	}, tool.Meta(map[string]any{"background": true}))
	note := tool.Func("note", "", func(_ context.Context, rc *tool.RunContext, _ struct{}) (string, error) {
		return "noted", rc.Enqueue(tool.PriorityWhenIdle, message.TextContent("idle note"))
	})
	m := model(func(n int, req *llm.Request) *llm.Response {
		all := mustJSON(t, req.Messages)
		switch {
		case n == 0:
			return calls(call("slow", "c1", `{}`), call("note", "c2", `{}`))
		case strings.Contains(all, "completed."):
			return text("done")
		case strings.Contains(all, "idle note"):
			close(gate) // the queued message arrived first: now let the task end
			return text("read the note")
		default:
			return text("waiting")
		}
	})
	a := newAgentCfg(t, agent.Config{Model: m, Capabilities: []agent.Capability{background.Tools(background.Config{})}}, slow, note)
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	res, err := a.Run(ctx, "go", nil)
	if err != nil {
		t.Fatalf("the queued message waited for the live task: %v", err)
	}
	if res.Output != "done" {
		t.Errorf("output %q", res.Output)
	}
}

// waitAfterStep is a StepHook that, after a step with tool calls, waits
// until ch is closed.
type waitAfterStep struct{ ch <-chan struct{} }

func (w waitAfterStep) AfterStep(ctx context.Context, _ *agent.RunInfo, final bool) ([]message.Part, error) {
	if final {
		return nil, nil
	}
	select {
	case <-w.ch:
		return nil, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// A fatal background outcome met before the next model request ends the
// run; the results of the step before it stay in the history, so that
// continuing it does not run those tools again.
func TestFatalOutcomeBeforeARequestKeepsTheStepsResults(t *testing.T) {
	t.Parallel()
	broken := tool.Func("broken", "", func(context.Context, *tool.RunContext, struct{}) (string, error) {
		return "", tool.Retry("again")
	}, tool.Meta(map[string]any{"background": true}), tool.Retries(0))
	var runs atomic.Int32
	fn := tool.Func("fn", "", func(context.Context, *tool.RunContext, struct{}) (string, error) {
		runs.Add(1)
		return "side effect", nil
	})
	finished := make(chan struct{})
	var once sync.Once
	m := turns(calls(call("broken", "c1", `{}`), call("fn", "c2", `{}`)), text("next"))
	a := newAgentCfg(t, agent.Config{Model: m, Capabilities: []agent.Capability{background.Tools(background.Config{}), waitAfterStep{finished}}}, broken, fn)
	res, err := a.Run(t.Context(), "go", &agent.RunOptions{OnEvent: func(e agent.Event) {
		if e.Type == agent.EventBackgroundTaskFinished {
			once.Do(func() { close(finished) })
		}
	}})
	var umb *agent.UnexpectedModelBehavior
	if !errors.As(err, &umb) {
		t.Fatalf("err = %v", err)
	}
	if got := mustJSON(t, res.Messages); !strings.Contains(got, "side effect") {
		t.Errorf("the history lost the step's results: %s", got)
	}
	res, err = a.Run(t.Context(), "", &agent.RunOptions{History: res.Messages})
	if err != nil || res.Output != "next" {
		t.Fatalf("%v %+v", err, res)
	}
	if n := runs.Load(); n != 1 {
		t.Errorf("the tool ran %d times", n)
	}
}

// A background tool whose own deadline passed (a timeout inside the tool)
// failed like any other error: the model is told, and the run goes on. Only
// the tool's own cancellation ends the run.
func TestBackgroundToolTimeoutIsAFailure(t *testing.T) {
	t.Parallel()
	fetch := tool.Func("fetch", "", func(context.Context, *tool.RunContext, struct{}) (string, error) {
		return "", fmt.Errorf("fetch: %w", context.DeadlineExceeded)
	}, tool.Meta(map[string]any{"background": true}))
	m := model(func(n int, req *llm.Request) *llm.Response {
		switch all := mustJSON(t, req.Messages); {
		case n == 0:
			return calls(call("fetch", "c1", `{}`))
		case strings.Contains(all, ") failed: "):
			return text("told")
		default:
			return text("waiting")
		}
	})
	res, err := newAgentCfg(t, agent.Config{Model: m, Capabilities: []agent.Capability{background.Tools(background.Config{})}}, fetch).Run(t.Context(), "go", nil)
	if err != nil || res.Output != "told" {
		t.Fatalf("%v %+v", err, res)
	}
	if got := mustJSON(t, res.Messages); !strings.Contains(got, ") failed: deadlineExceededError") {
		t.Errorf("history %s", got)
	}
}
