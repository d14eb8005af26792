package background_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/offload-dev/offload/pkg/agent"
	"github.com/offload-dev/offload/pkg/agent/background"
	"github.com/offload-dev/offload/pkg/llm"
	"github.com/offload-dev/offload/pkg/llm/script"
	"github.com/offload-dev/offload/pkg/message"
	"github.com/offload-dev/offload/pkg/tool"
)

// manualExec is an executor whose tasks finish when the test says so and
// report when the agent takes their outcome.
type manualExec struct {
	mu    sync.Mutex
	tasks map[string]*manualTask // by tool name
}

type manualTask struct {
	done, taken         chan struct{}
	finishOnce, takeOne sync.Once
	val                 any
	err                 error
}

func (e *manualExec) Start(_ context.Context, call *background.Call) (agent.BackgroundTask, error) {
	t := &manualTask{done: make(chan struct{}), taken: make(chan struct{}), val: call.Call.Call.ToolName + " done"}
	e.mu.Lock()
	e.tasks[call.Call.Call.ToolName] = t
	e.mu.Unlock()
	return t, nil
}

func (e *manualExec) task(name string) *manualTask {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.tasks[name]
}

func (t *manualTask) finish()               { t.finishOnce.Do(func() { close(t.done) }) }
func (t *manualTask) Done() <-chan struct{} { return t.done }
func (t *manualTask) Detach() bool          { return false }
func (t *manualTask) Cancel(reason string)  { t.err = &tool.TaskCancelled{Reason: reason}; t.finish() }
func (t *manualTask) Outcome() (any, error) {
	t.takeOne.Do(func() { close(t.taken) })
	return t.val, t.err
}

// TestUnobservedRunWatchesFirstTaskWhenSecondStarts checks the watchers of a run
// without an event observer: its first task runs without a watcher
// goroutine while it runs alone (the loop takes its outcome itself), and
// gets one when a second task starts, so that its outcome is taken as it
// arrives (here while the model answers a request), as an observed run's
// is; the follow-ups come in completion order.
func TestUnobservedRunWatchesFirstTaskWhenSecondStarts(t *testing.T) {
	t.Parallel()
	// On synctest's clock: "not taken while the model answered" is known
	// as soon as every goroutine of the run waits, not after a window.
	synctest.Test(t, func(t *testing.T) {
		exec := &manualExec{tasks: map[string]*manualTask{}}
		taken := func(name string) {
			select {
			case <-exec.task(name).taken:
			case <-time.After(5 * time.Second):
				t.Errorf("the outcome of %s was not taken while the model answered", name)
			}
		}
		var reqs []*llm.Request
		model := script.New("watch", func(_ context.Context, req *llm.Request) (*llm.Response, error) {
			reqs = append(reqs, req)
			text := func(s string) *llm.Response { return &llm.Response{Parts: []message.Part{message.Text{Content: s}}} }
			switch len(reqs) {
			case 1:
				return &llm.Response{Parts: []message.Part{message.ToolCall{ToolName: "first", ToolCallID: "c1", Args: "{}"}}}, nil
			case 2:
				return &llm.Response{Parts: []message.Part{message.ToolCall{ToolName: "second", ToolCallID: "c2", Args: "{}"}}}, nil
			case 3:
				exec.task("first").finish()
				taken("first")
				return text("waiting"), nil
			case 4:
				exec.task("second").finish()
				return text("waiting"), nil
			}
			return text("done"), nil
		})
		noop := func(name string) *tool.Tool {
			return tool.Func(name, "", func(context.Context, *tool.RunContext, struct{}) (string, error) { return "", nil }, tool.Meta(map[string]any{"background": true}))
		}
		a, err := agent.New(agent.Config{
			Model:        model,
			Toolsets:     []tool.Toolset{tool.MustSet(noop("first"), noop("second"))},
			Capabilities: []agent.Capability{background.Tools(background.Config{Executor: exec})},
		})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		res, err := a.Run(ctx, "go", nil)
		if err != nil {
			t.Fatal(err)
		}
		if res.Output != "done" || len(reqs) != 5 {
			t.Fatalf("output %q after %d requests", res.Output, len(reqs))
		}
		var got []string
		for _, m := range reqs[4].Messages {
			for _, p := range m.Parts {
				if u, ok := p.(message.UserPrompt); ok && strings.HasPrefix(u.Content[0].Text, "Background tool '") {
					got = append(got, strings.SplitN(u.Content[0].Text, " (", 2)[0])
				}
			}
		}
		if len(got) != 2 || got[0] != "Background tool 'first'" || got[1] != "Background tool 'second'" {
			t.Errorf("follow-ups %q, want first's then second's", got)
		}
	})
}
