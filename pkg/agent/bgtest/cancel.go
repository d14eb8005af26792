// Scenarios of cancellation and ending a run.

package bgtest

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/offload-dev/offload/internal/offloadtest"
	"github.com/offload-dev/offload/pkg/agent"
	"github.com/offload-dev/offload/pkg/tool"
)

// Scenario: test_background_tool_uses_context_cancel_to_stop_the_run
func cancelFromTool(t *testing.T, h Harness) {
	if h.Remote {
		t.Skip("a remote tool's RunContext is not bound to the agent's run: it cannot Cancel it")
	}
	var cancelled atomic.Int32
	startedA, startedB := make(chan struct{}), make(chan struct{})
	sibling := func(name string, started chan struct{}) *tool.Tool {
		return untilCancelled(name, started, func() { cancelled.Add(1) })
	}
	stopper := tool.Func("stopper", "", func(ctx context.Context, rc *tool.RunContext, _ struct{}) (string, error) {
		for _, ch := range []chan struct{}{startedA, startedB} {
			select {
			case <-ch:
			case <-ctx.Done():
				return "", ctx.Err()
			}
		}
		rc.Cancel()
		return "stopped", nil
	}, bg())
	m, _ := newModel(untilFollowUps(99, calls(call("a", "c1", "{}"), call("b", "c2", "{}"), call("stopper", "c3", "{}"))))
	_, err := newAgent(t, h, m, setup{}, sibling("a", startedA), sibling("b", startedB), stopper).Run(runCtx(t), "go", nil)
	if !errors.Is(err, agent.ErrRunCancelled) {
		t.Fatalf("err = %v", err)
	}
	if n := cancelled.Load(); n != 2 {
		t.Errorf("%d siblings cancelled, want 2", n)
	}
}

// Scenario: test_background_tool_ending_in_cancelled_error_cancels_the_run
func ownCancellation(t *testing.T, h Harness) {
	if h.Remote {
		t.Skip("a worker reports a tool's own cancellation as an error result: only a cancel sent by the agent yields cancelled (SPEC §5.2)")
	}
	started := make(chan struct{})
	siblingStopped := make(chan struct{})
	sibling := untilCancelled("sibling", started, func() { close(siblingStopped) })
	quitter := tool.Func("quitter", "", func(ctx context.Context, _ *tool.RunContext, _ struct{}) (string, error) {
		select {
		case <-started:
		case <-ctx.Done():
		}
		return "", context.Canceled // the tool's own cancellation
	}, bg())
	m, _ := newModel(untilFollowUps(99, calls(call("sibling", "c1", "{}"), call("quitter", "c2", "{}"))))
	_, err := newAgent(t, h, m, setup{}, sibling, quitter).Run(runCtx(t), "go", nil)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v", err)
	}
	offloadtest.WaitOrTimeout(t, siblingStopped, "the sibling's cancellation")
}

// Scenario: test_run_abort_waits_for_background_task_cancellation_cleanup
func abortWaitsCleanup(t *testing.T, h Harness) {
	var cleaned atomic.Bool
	started := make(chan struct{})
	slow := untilCancelled("slow", started, func() { cleaned.Store(true) }) // cleanup after the cancellation
	ctx, cancel := context.WithCancel(runCtx(t))
	defer cancel()
	m, _ := newModel(stopOnceStarted("slow", started, cancel))
	_, err := newAgent(t, h, m, setup{}, slow).Run(ctx, "go", nil)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v", err)
	}
	if !cleaned.Load() {
		t.Error("Run returned before the task's cleanup")
	}
}

// Scenario: test_run_abort_waits_for_default_sync_worker
// (A goroutine that ignores its context: the run waits for it.)
func abortWaitsStubborn(t *testing.T, h Harness) {
	var finished atomic.Bool
	release := make(chan struct{})
	started := make(chan struct{})
	stubborn := tool.Func("stubborn", "", func(context.Context, *tool.RunContext, struct{}) (string, error) {
		close(started)
		<-release // ignores its context
		finished.Store(true)
		return "late", nil
	}, bg())
	ctx, cancel := context.WithCancel(runCtx(t))
	defer cancel()
	go func() {
		<-ctx.Done()
		close(release)
	}()
	m, _ := newModel(stopOnceStarted("stubborn", started, cancel))
	_, err := newAgent(t, h, m, setup{}, stubborn).Run(ctx, "go", nil)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v", err)
	}
	if !finished.Load() {
		t.Error("Run returned before the goroutine finished")
	}
}

// Scenario: test_cancellation_token_cancels_live_tasks
// (Go's cancellation token is the run's context: SIGINT interrupts.)
func interruptCancels(t *testing.T, h Harness) {
	stopped := make(chan struct{})
	started := make(chan struct{})
	slow := untilCancelled("slow", started, func() { close(stopped) })
	ctx, cancel := context.WithCancel(runCtx(t))
	defer cancel()
	m, _ := newModel(stopOnceStarted("slow", started, cancel))
	var ev events
	res, err := newAgent(t, h, m, setup{}, slow).Run(ctx, "go", &agent.RunOptions{OnEvent: ev.add})
	if !errors.Is(err, context.Canceled) || agent.StatusOf(res, err) != agent.StatusInterrupted {
		t.Fatalf("err = %v", err)
	}
	offloadtest.WaitOrTimeout(t, stopped, "the task's cancellation")
	if fin := ev.ofType(agent.EventBackgroundTaskFinished); len(fin) != 1 || fin[0].Status != "cancelled" {
		t.Errorf("finished events %+v", fin)
	}
}
