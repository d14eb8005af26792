// Scenarios of events and iteration.

package bgtest

import (
	"context"
	"sync"
	"testing"

	"github.com/offload-dev/offload/pkg/agent"
	"github.com/offload-dev/offload/pkg/llm"
	"github.com/offload-dev/offload/pkg/progress"
	"github.com/offload-dev/offload/pkg/tool"
)

// Scenario: test_run_stream_waits_for_live_task_then_drops_its_result
// (Go has no run_stream: the event iterator waits for the live task like
// Run and, unlike run_stream, delivers its result.)
func iterDelivers(t *testing.T, h Harness) {
	gate := make(chan struct{})
	release := closer(gate)
	t.Cleanup(release)
	m, rec := newModel(func(n int, req *llm.Request) *llm.Response {
		switch {
		case n == 0:
			return calls(call("slow", "c1", "{}"))
		case len(followUps(req)) > 0:
			return text("done")
		default:
			release()
			return text("waiting")
		}
	})
	seq, result := newAgent(t, h, m, setup{}, gated("slow", "slow result", gate, nil, bg())).Iter(runCtx(t), "go", nil)
	var last agent.Event
	for e := range seq {
		last = e
	}
	res, err := result()
	if err != nil || res.Output != "done" || last.Type != agent.EventFinal {
		t.Fatalf("%v output %q last %s", err, res.Output, last.Type)
	}
	if rec.count() != 3 {
		t.Errorf("%d model requests, want 3", rec.count())
	}
}

// Scenario: events of SPEC §6.3 — tool_call, background_task_started,
// progress and background_task_finished name the task of the ack.
func eventsNameTheTask(t *testing.T, h Harness) {
	// Progress is best effort and travels apart from the result: the tool
	// returns once its report was seen, so the result cannot overtake it.
	seen := make(chan struct{})
	var once sync.Once
	reporting := tool.Func("reporting", "", func(ctx context.Context, _ *tool.RunContext, _ struct{}) (string, error) {
		progress.Report(ctx, "halfway", progress.Fraction(0.5))
		select {
		case <-seen:
		case <-ctx.Done():
			return "", ctx.Err()
		}
		return "reported", nil
	}, bg())
	m, rec := newModel(untilFollowUps(1, calls(call("reporting", "c1", "{}"))))
	var ev events
	onEvent := func(e agent.Event) {
		ev.add(e)
		if e.Type == agent.EventProgress {
			once.Do(func() { close(seen) })
		}
	}
	if _, err := newAgent(t, h, m, setup{}, reporting).Run(runCtx(t), "go", &agent.RunOptions{OnEvent: onEvent}); err != nil {
		t.Fatal(err)
	}
	id := acks(rec.requests()[1])["c1"]
	if id == "" {
		t.Fatal("no ack")
	}
	if tc := ev.ofType(agent.EventToolCall); len(tc) != 1 || tc[0].TaskID != id {
		t.Errorf("tool_call events %+v", tc)
	}
	if st := ev.ofType(agent.EventBackgroundTaskStarted); len(st) != 1 || st[0].TaskID != id || st[0].Tool != "reporting" || st[0].ToolCallID != "c1" {
		t.Errorf("started events %+v", st)
	}
	if pr := ev.ofType(agent.EventProgress); len(pr) != 1 || pr[0].TaskID != id || pr[0].Message != "halfway" {
		t.Errorf("progress events %+v", pr)
	}
	if fin := ev.ofType(agent.EventBackgroundTaskFinished); len(fin) != 1 || fin[0].TaskID != id || fin[0].Status != "completed" ||
		string(fin[0].Content) != `"reported"` { // a completed task's result, as its follow-up carries it
		t.Errorf("finished events %+v", fin)
	}
}
