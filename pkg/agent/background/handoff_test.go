package background_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/offload-dev/offload/pkg/agent"
	"github.com/offload-dev/offload/pkg/agent/background"
	"github.com/offload-dev/offload/pkg/deferred"
	"github.com/offload-dev/offload/pkg/tool"
)

// remoteLike is a tool whose call waits for work done elsewhere (a task on
// a worker, here a fakeTask of ex): when its run suspends while it waits,
// it hands the call off, as the JetStream remote toolset does.
func remoteLike(ex *reattachable, started chan<- string, deadline time.Time) *tool.Tool {
	return tool.Func("remote", "", func(ctx context.Context, rc *tool.RunContext, _ struct{}) (any, error) {
		task := ex.task(rc.TaskID)
		started <- rc.TaskID
		select {
		case <-task.Done():
			return task.Outcome()
		case <-agent.Suspending(ctx):
			return nil, &agent.Handoff{Task: task, TaskID: rc.TaskID, Attempt: rc.Attempt, Deadline: deadline}
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	})
}

// An inline call that waits when the run is suspended (SIGTERM) is kept
// like a background task: its acknowledgement is its result in the
// history, the suspended run lists it (with its attempt and deadline), its
// task runs on, and the continuing run delivers its outcome once.
func TestSuspendHandsOffAnInlineCall(t *testing.T) {
	t.Parallel()
	ex := &reattachable{}
	started := make(chan string, 1)
	suspend := make(chan struct{})
	deadline := time.Now().Add(time.Hour).UTC().Truncate(time.Second)
	m := turns(calls(call("remote", "c1", `{}`)))
	mk := func(m *fnModel) *agent.Agent {
		remote := remoteLike(ex, started, deadline)
		remote.Dispatched = true
		return newAgentCfg(t, agent.Config{Model: m, Capabilities: []agent.Capability{background.Tools(background.Config{Executor: ex})}}, remote)
	}
	var events []agent.Event
	go func() { <-started; close(suspend) }()
	res, err := mk(m).Run(t.Context(), "go", &agent.RunOptions{Suspend: suspend, OnEvent: func(e agent.Event) { events = append(events, e) }})
	if err != nil || !res.Suspended || agent.StatusOf(res, err) != agent.StatusPaused {
		t.Fatalf("err %v suspended %v", err, res != nil && res.Suspended)
	}
	if len(res.Background) != 1 {
		t.Fatalf("background %+v, want the inline call", res.Background)
	}
	bg := res.Background[0]
	if bg.Tool != "remote" || bg.ToolCallID != "c1" || bg.TaskID == "" || bg.Kind != deferred.KindBackground || !bg.Deadline.Equal(deadline) {
		t.Errorf("pending task %+v", bg)
	}
	select {
	case <-ex.task(bg.TaskID).Done():
		t.Fatal("the suspended run cancelled the call's task")
	default:
	}
	ack := "Tool 'remote' is running in the background as task " + bg.TaskID + "."
	if got := mustJSON(t, res.Messages); !strings.Contains(got, ack) {
		t.Errorf("the history lacks the acknowledgement %q: %s", ack, got)
	}
	var sawStart bool
	for _, e := range events {
		if e.Type == agent.EventBackgroundTaskStarted && e.TaskID == bg.TaskID {
			sawStart = true
		}
		if e.Type == agent.EventBackgroundTaskFinished {
			t.Errorf("finished event for a task that runs on: %+v", e)
		}
	}
	if !sawStart {
		t.Error("no background_task_started event for the handed-off call")
	}

	// The continuing run delivers the outcome once, as a follow-up.
	m2 := turns(text("done"))
	out, err := mk(m2).Run(t.Context(), "", &agent.RunOptions{History: res.Messages, Background: []agent.AdoptedTask{{Task: bg, Done: true, Value: "42"}}})
	if err != nil || out.Output != "done" {
		t.Fatalf("resume: %v %+v", err, out)
	}
	want := "Background tool 'remote' (task " + bg.TaskID + ") completed.\nResult: 42"
	if got := mustJSON(t, m2.Requests()[0].Messages); strings.Count(got, "completed.\\nResult: 42") != 1 || !strings.Contains(got, strings.ReplaceAll(want, "\n", "\\n")) {
		t.Errorf("the resume's request does not carry the outcome once: %s", got)
	}
}

// Without an executor that can attach to a task again, a run cannot keep a
// call it stops waiting for: Suspending never fires and the call is
// waited for.
func TestSuspendingIsNilWithoutAnAttacher(t *testing.T) {
	t.Parallel()
	for name, caps := range map[string][]agent.Capability{
		"no capability":  nil,
		"plain executor": {background.Tools(background.Config{Executor: plainExecutor{&reattachable{}}})},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			var got <-chan struct{}
			probe := tool.Func("probe", "", func(ctx context.Context, _ *tool.RunContext, _ struct{}) (string, error) {
				got = agent.Suspending(ctx)
				return "ok", nil
			})
			m := turns(calls(call("probe", "c1", `{}`)), text("done"))
			a := newAgentCfg(t, agent.Config{Model: m, Capabilities: caps}, probe)
			if _, err := a.Run(t.Context(), "go", &agent.RunOptions{Suspend: make(chan struct{})}); err != nil {
				t.Fatal(err)
			}
			if got != nil {
				t.Error("Suspending returned a channel the run cannot honour")
			}
		})
	}
}

// A handoff in a run that cannot keep it (a tool that ignored Suspending)
// is a programming error: the task is cancelled and the run ends, rather
// than losing the call.
func TestHandoffWithoutBackgroundToolsCancelsTheTask(t *testing.T) {
	t.Parallel()
	ex := &reattachable{}
	bad := tool.Func("bad", "", func(ctx context.Context, rc *tool.RunContext, _ struct{}) (any, error) {
		return nil, &agent.Handoff{Task: ex.task("t1"), TaskID: "t1"}
	})
	m := turns(calls(call("bad", "c1", `{}`)))
	a := newAgent(t, m, bad)
	if _, err := a.Run(t.Context(), "go", nil); err == nil || !strings.Contains(err.Error(), "cannot keep it") {
		t.Fatalf("run error %v, want the handoff refused", err)
	}
	select {
	case <-ex.task("t1").Done():
	default:
		t.Fatal("the task of a handoff nobody keeps was not cancelled")
	}
}
