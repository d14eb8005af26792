// Scenarios of pausing (deferred tools) and suspending a run.

package bgtest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/offload-dev/offload/internal/offloadtest"
	"github.com/offload-dev/offload/pkg/agent"
	"github.com/offload-dev/offload/pkg/deferred"
	"github.com/offload-dev/offload/pkg/tool"
)

// Scenario: test_deferred_tool_pause_is_not_held_behind_background_tasks
func pauseNotHeld(t *testing.T, h Harness) {
	stopped := make(chan struct{})
	started := make(chan struct{})
	slow := untilCancelled("slow", started, func() { close(stopped) })
	gate := approveMe()
	m, rec := newModel(untilFollowUps(1, calls(call("slow", "c1", "{}"), call("approve_me", "c2", "{}"))))
	// The pause comes once the task is running.
	handler := agent.HandleDeferredToolCalls(func(ctx context.Context, _ *tool.RunContext, _ *deferred.Requests) (*deferred.Results, error) {
		select {
		case <-started:
			return nil, nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	})
	var ev events
	res, err := newAgent(t, h, m, withHandler(handler), slow, gate).Run(runCtx(t), "go", &agent.RunOptions{OnEvent: ev.add})
	if err != nil || !res.Paused() || len(res.Deferred.Approvals) != 1 {
		t.Fatalf("%v paused %v", err, res.Paused())
	}
	if rec.count() != 1 {
		t.Errorf("%d model requests, want 1", rec.count())
	}
	startedEv := ev.ofType(agent.EventBackgroundTaskStarted)
	if len(startedEv) != 1 {
		t.Fatalf("started events %v", startedEv)
	}
	if h.Remote {
		if len(res.Background) != 1 || res.Background[0].TaskID != startedEv[0].TaskID || res.Background[0].Kind != deferred.KindBackground {
			t.Errorf("live remote task not recorded: %+v", res.Background)
		}
		rec := res.PendingRecord()
		if rec == nil || len(rec.Tasks) != 2 {
			t.Errorf("pending record %+v", rec)
		}
		return
	}
	offloadtest.WaitOrTimeout(t, stopped, "the in-process task's cancellation")
	if len(res.Background) != 0 {
		t.Errorf("in-process task recorded as running on: %+v", res.Background)
	}
	if fin := ev.ofType(agent.EventBackgroundTaskFinished); len(fin) != 1 || fin[0].Status != "cancelled" {
		t.Errorf("finished events %+v", fin)
	}
}

// waitFinished is a DeferredHandler that waits until n background tasks
// finished, then declines: the pause happens after their outcomes arrived.
func waitFinished(ev *events, n int) agent.Capability {
	done := make(chan struct{})
	var count atomic.Int32
	ev.on = func(e agent.Event) {
		if e.Type == agent.EventBackgroundTaskFinished && int(count.Add(1)) == n {
			close(done)
		}
	}
	return agent.HandleDeferredToolCalls(func(ctx context.Context, _ *tool.RunContext, _ *deferred.Requests) (*deferred.Results, error) {
		select {
		case <-done:
			return nil, nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	})
}

// Scenario: test_deferred_tool_pause_wins_over_a_completed_background_result
func pauseWinsOverCompleted(t *testing.T, h Harness) {
	quick := tool.Func("quick", "", func(context.Context, *tool.RunContext, struct{}) (string, error) { return "quick result", nil }, bg())
	gate := approveMe()
	m, rec := newModel(untilFollowUps(1, calls(call("quick", "c1", "{}"), call("approve_me", "c2", "{}"))))
	ev := &events{}
	handler := waitFinished(ev, 1)
	res, err := newAgent(t, h, m, withHandler(handler), quick, gate).Run(runCtx(t), "go", &agent.RunOptions{OnEvent: ev.add})
	if err != nil || !res.Paused() {
		t.Fatalf("%v paused %v", err, res.Paused())
	}
	if rec.count() != 1 {
		t.Errorf("model called %d times, want once", rec.count())
	}
	// Beyond the harness (which drops it): the outcome is kept in the
	// history, for the resume to deliver.
	b, _ := json.Marshal(res.Messages)
	if !bytes.Contains(b, []byte(`completed.\nResult: quick result`)) {
		t.Errorf("the completed outcome was dropped at the pause: %s", b)
	}
}

// Scenario: test_fatal_error_during_run_teardown_is_propagated
func fatalAtPause(t *testing.T, h Harness) {
	broken := tool.Func("broken", "", func(context.Context, *tool.RunContext, struct{}) (string, error) {
		return "", tool.Retry("again")
	}, bg(), tool.Retries(0))
	gate := approveMe()
	m, _ := newModel(untilFollowUps(1, calls(call("broken", "c1", "{}"), call("approve_me", "c2", "{}"))))
	ev := &events{}
	handler := waitFinished(ev, 1)
	_, err := newAgent(t, h, m, withHandler(handler), broken, gate).Run(runCtx(t), "go", &agent.RunOptions{OnEvent: ev.add})
	var umb *agent.UnexpectedModelBehavior
	if !errors.As(err, &umb) {
		t.Fatalf("err = %v, want the fatal outcome", err)
	}
}

// Scenario: SIGTERM (SPEC §6.1) — RunOptions.Suspend stops the run at its
// next safe point; live tasks are detached when the executor can,
// cancelled otherwise; the run returns paused.
func suspend(t *testing.T, h Harness) {
	suspendCh := make(chan struct{})
	stop := closer(suspendCh)
	stopped := make(chan struct{})
	started := make(chan struct{})
	slow := untilCancelled("slow", started, func() { close(stopped) })
	m, rec := newModel(stopOnceStarted("slow", started, stop))
	res, err := newAgent(t, h, m, setup{}, slow).Run(runCtx(t), "go", &agent.RunOptions{Suspend: suspendCh})
	if err != nil || !res.Suspended || agent.StatusOf(res, err) != agent.StatusPaused {
		t.Fatalf("%v suspended %v", err, res.Suspended)
	}
	if rec.count() != 2 {
		t.Errorf("%d model requests, want 2", rec.count())
	}
	if h.Remote {
		if len(res.Background) != 1 {
			t.Errorf("live remote task not recorded: %+v", res.Background)
		}
		return
	}
	offloadtest.WaitOrTimeout(t, stopped, "the in-process task's cancellation")
	if len(res.Background) != 0 {
		t.Errorf("in-process task recorded as running on: %+v", res.Background)
	}
}
