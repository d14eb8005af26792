package background_test

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/offload-dev/offload/pkg/agent"
	"github.com/offload-dev/offload/pkg/agent/background"
	"github.com/offload-dev/offload/pkg/deferred"
	"github.com/offload-dev/offload/pkg/llm"
	"github.com/offload-dev/offload/pkg/progress"
	"github.com/offload-dev/offload/pkg/tool"
)

// handleExec is an executor whose tasks behave like a worker's handle
// (natsjs): they finish when the test says so, can outlive the run, and a
// detach closes Done with an error of its own (the handle no longer
// reports the outcome), as natsjs.ErrDetached does. Start keeps the
// context, so the test can report progress as a relay would.
type handleExec struct {
	mu    sync.Mutex
	tasks []*handleTask
	ctxs  []context.Context
}

var errDetachedHandle = errors.New("test: task detached")

type handleTask struct {
	done chan struct{}
	once sync.Once
	val  any
	err  error
}

func (e *handleExec) Start(ctx context.Context, _ *background.Call) (agent.BackgroundTask, error) {
	t := &handleTask{done: make(chan struct{})}
	e.mu.Lock()
	e.tasks = append(e.tasks, t)
	e.ctxs = append(e.ctxs, ctx)
	e.mu.Unlock()
	return t, nil
}

// task returns the i-th task started and its context.
func (e *handleExec) task(i int) (*handleTask, context.Context) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.tasks[i], e.ctxs[i]
}

func (t *handleTask) end(val any, err error) {
	t.once.Do(func() {
		t.val, t.err = val, err
		close(t.done)
	})
}

func (t *handleTask) Done() <-chan struct{} { return t.done }
func (t *handleTask) Outcome() (any, error) { return t.val, t.err }
func (t *handleTask) Cancel(reason string)  { t.end(nil, &tool.TaskCancelled{Reason: reason}) }
func (t *handleTask) Detach() bool          { t.end(nil, errDetachedHandle); return true }

// eventList collects a run's events.
type eventList struct {
	mu  sync.Mutex
	evs []agent.Event
}

func (l *eventList) add(e agent.Event) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.evs = append(l.evs, e)
}

func (l *eventList) events() []agent.Event {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]agent.Event(nil), l.evs...)
}

func backgroundTool(name string) *tool.Tool {
	return tool.Func(name, "", func(context.Context, *tool.RunContext, struct{}) (string, error) { return "", nil },
		tool.Meta(map[string]any{"background": true}))
}

// A task detached on a suspend (SIGTERM) runs on for the resume: it has
// not finished, so no background_task_finished is emitted for it (least
// of all a "failed" one for the detach closing its handle), and the final
// event lists it as pending.
func TestSuspendedTaskGetsNoFinishedEvent(t *testing.T) {
	t.Parallel()
	exec := &handleExec{}
	suspend := make(chan struct{})
	m := model(func(n int, _ *llm.Request) *llm.Response {
		switch n {
		case 0:
			return calls(call("research", "c1", `{}`))
		case 1:
			close(suspend) // SIGTERM while the task runs
			return text("waiting")
		}
		return nil
	})
	a := newAgentCfg(t, agent.Config{Model: m, Capabilities: []agent.Capability{
		background.Tools(background.Config{Executor: exec}),
	}}, backgroundTool("research"))
	var log eventList
	res, err := a.Run(t.Context(), "go", &agent.RunOptions{OnEvent: log.add, Suspend: suspend})
	if err != nil || !res.Suspended || len(res.Background) != 1 {
		t.Fatalf("err %v suspended %v background %+v", err, res.Suspended, res.Background)
	}
	task := res.Background[0].TaskID
	var final *agent.Final
	for _, e := range log.events() {
		if e.Type == agent.EventBackgroundTaskFinished {
			t.Errorf("a detached task got a finished event: %+v", e)
		}
		if e.Type == agent.EventFinal {
			final = e.Final
		}
	}
	if final == nil || final.Status != agent.StatusPaused || len(final.Pending) != 1 || final.Pending[0].TaskID != task || final.Pending[0].Kind != deferred.KindBackground {
		t.Fatalf("final %+v", final)
	}
}

// A report that arrives once the task's finished event was emitted (a
// worker's last progress message overtaking its result) is dropped: no
// progress event follows background_task_finished for the same task.
func TestNoProgressAfterTheTaskFinished(t *testing.T) {
	t.Parallel()
	exec := &handleExec{}
	m := model(func(n int, _ *llm.Request) *llm.Response {
		switch n {
		case 0:
			return calls(call("research", "c1", `{}`))
		case 1:
			task, ctx := exec.task(0)
			progress.Report(ctx, "halfway", progress.Fraction(0.5))
			task.end("found", nil)
			return text("waiting")
		case 2:
			// The follow-up is here: the task's finished event was emitted.
			_, ctx := exec.task(0)
			progress.Report(ctx, "late", progress.Fraction(1))
			return text("done")
		}
		return nil
	})
	a := newAgentCfg(t, agent.Config{Model: m, Capabilities: []agent.Capability{
		background.Tools(background.Config{Executor: exec}),
	}}, backgroundTool("research"))
	var log eventList
	res, err := a.Run(t.Context(), "go", &agent.RunOptions{OnEvent: log.add})
	if err != nil || res.Output != "done" {
		t.Fatalf("err %v output %q", err, res.Output)
	}
	finished, reports := false, 0
	for _, e := range log.events() {
		switch e.Type {
		case agent.EventBackgroundTaskFinished:
			finished = true
			if e.Status != "completed" {
				t.Errorf("finished %+v", e)
			}
		case agent.EventProgress:
			reports++
			if finished {
				t.Errorf("progress after the task finished: %+v", e)
			}
		}
	}
	if !finished || reports != 1 {
		t.Errorf("finished %v, %d progress events, want the one before", finished, reports)
	}
}

// The final event of an interrupted run says what interrupted it (the
// cause of its context) and what that did, not Go's "context canceled".
func TestInterruptedFinalSaysWhy(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name  string
		cause error
		want  string
	}{
		{"with a cause", interruptCause{}, "interrupted by the test: live tasks were cancelled"},
		{"without", nil, "interrupted: the run's context was cancelled; live tasks were cancelled"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			started := make(chan struct{})
			block := tool.Func("block", "", func(ctx context.Context, _ *tool.RunContext, _ struct{}) (string, error) {
				close(started)
				<-ctx.Done()
				return "", ctx.Err()
			})
			ctx, cancel := context.WithCancelCause(t.Context())
			go func() { <-started; cancel(c.cause) }()
			var final *agent.Final
			_, err := newAgent(t, turns(calls(call("block", "c1", "{}"))), block).Run(ctx, "go", &agent.RunOptions{OnEvent: func(e agent.Event) {
				if e.Type == agent.EventFinal {
					final = e.Final
				}
			}})
			if !errors.Is(err, context.Canceled) || final == nil || final.Status != agent.StatusInterrupted {
				t.Fatalf("err %v final %+v", err, final)
			}
			if final.Error != c.want {
				t.Errorf("final error %q, want %q", final.Error, c.want)
			}
		})
	}
}

// interruptCause is a cancellation cause as the agent command gives its
// context on SIGINT.
type interruptCause struct{}

func (interruptCause) Error() string        { return "interrupted by the test" }
func (interruptCause) Is(target error) bool { return target == context.Canceled }
