package background_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/offload-dev/offload/internal/offloadtest"
	"github.com/offload-dev/offload/pkg/agent"
	"github.com/offload-dev/offload/pkg/agent/background"
	"github.com/offload-dev/offload/pkg/deferred"
	"github.com/offload-dev/offload/pkg/llm"
	"github.com/offload-dev/offload/pkg/message"
	"github.com/offload-dev/offload/pkg/tool"
)

// reattachable is an executor whose tasks outlive the run (as remote ones
// do) and that can attach to them again.
type reattachable struct {
	mu    sync.Mutex
	tasks map[string]*fakeTask
}

type fakeTask struct {
	done chan struct{}
	once sync.Once
	val  any
	err  error
}

func (f *fakeTask) finish(v any, err error) {
	f.once.Do(func() { f.val, f.err = v, err; close(f.done) })
}
func (f *fakeTask) Done() <-chan struct{} { return f.done }
func (f *fakeTask) Outcome() (any, error) { return f.val, f.err }
func (f *fakeTask) Cancel(reason string)  { f.finish(nil, &tool.TaskCancelled{Reason: reason}) }
func (f *fakeTask) Detach() bool          { return true }

func (d *reattachable) task(id string) *fakeTask {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.tasks == nil {
		d.tasks = map[string]*fakeTask{}
	}
	if d.tasks[id] == nil {
		d.tasks[id] = &fakeTask{done: make(chan struct{})}
	}
	return d.tasks[id]
}

func (d *reattachable) Start(_ context.Context, c *background.Call) (agent.BackgroundTask, error) {
	return d.task(c.TaskID), nil
}

func (d *reattachable) Attach(_ context.Context, _ *agent.RunInfo, pt deferred.PendingTask) (agent.BackgroundTask, error) {
	return d.task(pt.TaskID), nil
}

// plainExecutor starts tasks that can be detached but not attached to.
type plainExecutor struct{ d *reattachable }

func (p plainExecutor) Start(ctx context.Context, c *background.Call) (agent.BackgroundTask, error) {
	return p.d.Start(ctx, c)
}

// pausedWithBackground runs until the pause of [slow in the background,
// gate awaiting approval] and returns the result.
func pausedWithBackground(t *testing.T, ex background.Executor) *agent.Result {
	t.Helper()
	slow := tool.Func("slow", "", func(context.Context, *tool.RunContext, struct{}) (string, error) { return "unused", nil }, tool.Meta(map[string]any{"background": true}))
	gate := tool.Func("gate", "", func(context.Context, *tool.RunContext, struct{}) (string, error) { return "opened", nil }, tool.NeedsApproval())
	m := turns(calls(call("slow", "c1", "{}"), call("gate", "c2", "{}")))
	a := newAgentCfg(t, agent.Config{Model: m, AllowDeferred: true, Capabilities: []agent.Capability{background.Tools(background.Config{Executor: ex})}}, slow, gate)
	res, err := a.Run(context.Background(), "go", nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Background) != 1 || res.Background[0].Tool != "slow" || res.Deferred.Len() != 1 {
		t.Fatalf("pause: background %+v, deferred %+v", res.Background, res.Deferred)
	}
	return res
}

// resumeAgent is the agent of the resumed run: same tools, the given model.
func resumeAgent(t *testing.T, m llm.Model, ex background.Executor) *agent.Agent {
	slow := tool.Func("slow", "", func(context.Context, *tool.RunContext, struct{}) (string, error) { return "unused", nil }, tool.Meta(map[string]any{"background": true}))
	gate := tool.Func("gate", "", func(context.Context, *tool.RunContext, struct{}) (string, error) { return "opened", nil }, tool.NeedsApproval())
	return newAgentCfg(t, agent.Config{Model: m, AllowDeferred: true, Capabilities: []agent.Capability{background.Tools(background.Config{Executor: ex})}}, slow, gate)
}

// An outcome that arrived while no run waited reaches the model with the
// resume's first request, next to the approved call's result.
func TestResumeDeliversArrivedBackgroundOutcome(t *testing.T) {
	ex := &reattachable{}
	res := pausedWithBackground(t, ex)
	bg := res.Background[0]
	m := turns(text("done"))
	out, err := resumeAgent(t, m, ex).Run(context.Background(), "", &agent.RunOptions{
		History:         res.Messages,
		DeferredResults: &deferred.Results{Approvals: map[string]any{"c2": true}},
		Background:      []agent.AdoptedTask{{Task: bg, Done: true, Value: "found it"}},
	})
	if err != nil || out.Output != "done" {
		t.Fatalf("%v output %q", err, out.Output)
	}
	reqs := m.Requests()
	if len(reqs) != 1 {
		t.Fatalf("%d model requests, want 1", len(reqs))
	}
	want := "Background tool 'slow' (task " + bg.TaskID + ") completed.\nResult: found it"
	var got []string
	var approved bool
	for _, p := range reqs[0].Messages[len(reqs[0].Messages)-1].Parts {
		switch x := p.(type) {
		case message.UserPrompt:
			got = append(got, x.Content[0].Text)
		case message.ToolReturn:
			approved = approved || (x.ToolCallID == "c2" && x.Outcome == message.OutcomeSuccess)
		}
	}
	if len(got) != 1 || got[0] != want || !approved {
		t.Fatalf("first request: follow-ups %q (want %q), approved call answered: %v", got, want, approved)
	}
}

// A task still running at the resume is attached and waited for: the
// model gets its outcome once it completes, and the run returns after.
func TestResumeAttachesRunningBackgroundTask(t *testing.T) {
	ex := &reattachable{}
	res := pausedWithBackground(t, ex)
	bg := res.Background[0]
	m := model(func(n int, req *llm.Request) *llm.Response {
		last := req.Messages[len(req.Messages)-1]
		for _, p := range last.Parts {
			if u, ok := p.(message.UserPrompt); ok && strings.Contains(u.Content[0].Text, "completed") {
				return text("done: " + u.Content[0].Text)
			}
		}
		if n == 0 {
			ex.task(bg.TaskID).finish("late result", nil) // completes while the model talks
		}
		return text("waiting")
	})
	done := make(chan struct{})
	var out *agent.Result
	var err error
	go func() {
		defer close(done)
		out, err = resumeAgent(t, m, ex).Run(context.Background(), "", &agent.RunOptions{
			History:         res.Messages,
			DeferredResults: &deferred.Results{Approvals: map[string]any{"c2": true}},
			Background:      []agent.AdoptedTask{{Task: bg}},
		})
	}()
	offloadtest.WaitOrTimeout(t, done, "the resumed run to return")
	if err != nil || !strings.HasSuffix(out.Output, "completed.\nResult: late result") {
		t.Fatalf("%v output %q", err, out.Output)
	}
	if n := len(m.Requests()); n != 2 {
		t.Errorf("%d model requests, want 2", n)
	}
}

// A still-running task with an executor that cannot attach fails the run
// before any model request.
func TestResumeWithoutAttacherFails(t *testing.T) {
	d := &reattachable{}
	res := pausedWithBackground(t, plainExecutor{d})
	m := turns(text("never"))
	_, err := resumeAgent(t, m, plainExecutor{d}).Run(context.Background(), "", &agent.RunOptions{
		History:         res.Messages,
		DeferredResults: &deferred.Results{Approvals: map[string]any{"c2": true}},
		Background:      []agent.AdoptedTask{{Task: res.Background[0]}},
	})
	if err == nil || !strings.Contains(err.Error(), "cannot attach") {
		t.Fatalf("err = %v", err)
	}
	if n := len(m.Requests()); n != 0 {
		t.Errorf("%d model requests", n)
	}
}

// suspendBeforeRequest is a ModelRequestHook that closes the run's Suspend
// channel before the first model request.
type suspendBeforeRequest struct {
	once    sync.Once
	suspend chan struct{}
}

func (s *suspendBeforeRequest) BeforeModelRequest(context.Context, *agent.RunInfo, *message.Message) error {
	s.once.Do(func() { close(s.suspend) })
	return nil
}

// A resumed run that waits for its adopted tasks before its first model
// request stops there when suspended, as it does in any other wait: paused,
// its tasks still pending, not failed.
func TestSuspendWhileAResumeWaitsForItsTasks(t *testing.T) {
	ex := &reattachable{}
	res := pausedWithBackground(t, ex)
	bg := res.Background[0]
	// The approval was answered meanwhile: nothing is new for the model
	// until the task's outcome arrives.
	history := append(res.Messages, message.NewRequest(message.ToolReturn{ToolName: "gate", ToolCallID: "c2", Content: []byte(`"opened"`), Outcome: message.OutcomeSuccess}))
	hook := &suspendBeforeRequest{suspend: make(chan struct{})}
	m := turns(text("never"))
	a := newAgentCfg(t, agent.Config{Model: m, Capabilities: []agent.Capability{hook, background.Tools(background.Config{Executor: ex})}},
		tool.Func("slow", "", func(context.Context, *tool.RunContext, struct{}) (string, error) { return "unused", nil }, tool.Meta(map[string]any{"background": true})))
	out, err := a.Run(context.Background(), "", &agent.RunOptions{History: history, Background: []agent.AdoptedTask{{Task: bg}}, Suspend: hook.suspend})
	if err != nil || !out.Suspended || agent.StatusOf(out, err) != agent.StatusPaused {
		t.Fatalf("err = %v, suspended %v", err, out.Suspended)
	}
	if len(out.Background) != 1 || out.Background[0].TaskID != bg.TaskID {
		t.Errorf("background %+v", out.Background)
	}
	select {
	case <-ex.task(bg.TaskID).Done():
		t.Error("the suspended run cancelled its task")
	default:
	}
	if n := len(m.Requests()); n != 0 {
		t.Errorf("%d model requests", n)
	}
}

// On a resume with a new prompt, the prompt stays the last part of the
// first request: outcomes that arrived while no run waited come before it,
// next to the answered calls' results.
func TestResumePromptStaysLastAfterArrivedOutcomes(t *testing.T) {
	ex := &reattachable{}
	res := pausedWithBackground(t, ex)
	m := turns(text("done"))
	_, err := resumeAgent(t, m, ex).Run(context.Background(), "and now?", &agent.RunOptions{
		History:         res.Messages,
		DeferredResults: &deferred.Results{Approvals: map[string]any{"c2": true}},
		Background:      []agent.AdoptedTask{{Task: res.Background[0], Done: true, Value: "found it"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	parts := lastRequestParts(t, m, 0)
	u, ok := parts[len(parts)-1].(message.UserPrompt)
	if !ok || u.Content[0].Text != "and now?" {
		t.Errorf("the last part is %+v, want the new prompt", parts[len(parts)-1])
	}
}

// A new prompt on a history whose tasks still run reaches the model at
// once: the run does not wait for an outcome first.
func TestNewPromptIsNotHeldBehindAdoptedTasks(t *testing.T) {
	ex := &reattachable{}
	res := pausedWithBackground(t, ex)
	bg := res.Background[0]
	history := append(res.Messages, message.NewRequest(message.ToolReturn{ToolName: "gate", ToolCallID: "c2", Content: []byte(`"opened"`), Outcome: message.OutcomeSuccess}))
	m := model(func(n int, req *llm.Request) *llm.Response {
		if n == 0 {
			ex.task(bg.TaskID).finish("late result", nil) // only the model's turn lets the task end
			return text("working on it")
		}
		return text("done")
	})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	out, err := resumeAgent(t, m, ex).Run(ctx, "status?", &agent.RunOptions{History: history, Background: []agent.AdoptedTask{{Task: bg}}})
	if err != nil || out.Output != "done" {
		t.Fatalf("the prompt waited for the task: %v %+v", err, out)
	}
	parts := lastRequestParts(t, m, 0)
	if u, ok := parts[len(parts)-1].(message.UserPrompt); !ok || u.Content[0].Text != "status?" {
		t.Errorf("first request ends with %+v", parts[len(parts)-1])
	}
}
