// Scenarios of timing and overlap: slow calls, quick calls and concurrent runs.

package bgtest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/offload-dev/offload/pkg/agent"
	"github.com/offload-dev/offload/pkg/llm"
	"github.com/offload-dev/offload/pkg/message"
	"github.com/offload-dev/offload/pkg/tool"
)

// Scenario: test_sequential_tool_stays_on_normal_execution_path
func sequentialStaysInline(t *testing.T, h Harness) {
	if h.Remote {
		t.Skip("remote tools do not carry Sequential: the registry (SPEC §5.4) has no such field")
	}
	var running atomic.Int32
	var overlapped atomic.Bool
	body := func(result string) func(context.Context, *tool.RunContext, struct{}) (string, error) {
		return func(context.Context, *tool.RunContext, struct{}) (string, error) {
			if running.Add(1) > 1 {
				overlapped.Store(true)
			}
			defer running.Add(-1)
			return result, nil
		}
	}
	seq := tool.Func("seq", "", body("seq result"), bg(), tool.Sequential())
	later := tool.Func("later", "", body("later result"), bg())
	m, rec := newModel(func(n int, req *llm.Request) *llm.Response {
		switch {
		case n == 0:
			return calls(call("seq", "c1", "{}"))
		case n == 1:
			return calls(call("later", "c2", "{}"))
		case len(followUps(req)) >= 1:
			return text("done")
		default:
			return text("waiting")
		}
	})
	if _, err := newAgent(t, h, m, setup{}, seq, later).Run(runCtx(t), "go", nil); err != nil {
		t.Fatal(err)
	}
	if got := toolReturns(rec.requests()[1])["c1"]; got != "seq result" {
		t.Errorf("sequential tool returned %q, want its real result", got)
	}
	if overlapped.Load() {
		t.Error("the sequential tool overlapped the background one")
	}
}

type whoArgs struct {
	Who string `json:"who"`
}

// Scenario: test_concurrent_runs_do_not_share_tasks
func concurrentRuns(t *testing.T, h Harness) {
	// Both tasks finish only once both runs started theirs.
	var startedN atomic.Int32
	both := make(chan struct{})
	work := tool.Func("work", "", func(ctx context.Context, _ *tool.RunContext, a whoArgs) (string, error) {
		if startedN.Add(1) == 2 {
			close(both)
		}
		select {
		case <-both:
			return "result for " + a.Who, nil
		case <-ctx.Done():
			return "", ctx.Err()
		}
	}, bg())
	m, rec := newModel(func(_ int, req *llm.Request) *llm.Response {
		if len(acks(req)) == 0 {
			who := req.Messages[len(req.Messages)-1].Parts[len(req.Messages[len(req.Messages)-1].Parts)-1].(message.UserPrompt).Content[0].Text
			return calls(call("work", "c-"+who, fmt.Sprintf(`{"who":%q}`, who)))
		}
		if len(followUps(req)) > 0 {
			return text("done")
		}
		return text("waiting")
	})
	a := newAgent(t, h, m, setup{}, work)
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i, who := range []string{"a", "b"} {
		wg.Go(func() { _, errs[i] = a.Run(runCtx(t), who, nil) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	for _, req := range rec.requests() {
		a := acks(req)
		fu := followUpTexts(req)
		if len(fu) == 0 {
			continue
		}
		if len(a) != 1 || len(fu) != 1 {
			t.Fatalf("a run saw another's task: acks %v follow-ups %q", a, fu)
		}
		for id, task := range a {
			who := strings.TrimPrefix(id, "c-")
			want := fmt.Sprintf("Background tool 'work' (task %s) completed.\nResult: result for %s", task, who)
			if fu[0] != want {
				t.Errorf("follow-up %q, want %q", fu[0], want)
			}
		}
	}
}

// Scenario: test_queued_result_is_not_delayed_by_an_unrelated_live_task
func queuedNotDelayed(t *testing.T, h Harness) {
	gate := make(chan struct{})
	release := closer(gate)
	t.Cleanup(release)
	fast := tool.Func("fast", "", func(context.Context, *tool.RunContext, struct{}) (string, error) { return "fast result", nil }, bg())
	slow := gated("slow", "slow result", gate, nil, bg())
	m, rec := newModel(func(n int, req *llm.Request) *llm.Response {
		switch {
		case n == 0:
			return calls(call("fast", "c1", "{}"), call("slow", "c2", "{}"))
		case hasFollowUp(req, "Background tool 'slow'"):
			return text("done")
		case hasFollowUp(req, "Background tool 'fast'"):
			release()
			return text("waiting for slow")
		default:
			return text("waiting")
		}
	})
	res, err := newAgent(t, h, m, setup{}, fast, slow).Run(runCtx(t), "go", nil)
	if err != nil || res.Output != "done" {
		t.Fatalf("%v output %q", err, res.Output)
	}
	for _, req := range rec.requests() {
		if hasFollowUp(req, "Background tool 'fast'") {
			if hasFollowUp(req, "Background tool 'slow'") {
				t.Error("fast's result waited for slow's")
			}
			break
		}
	}
}

// Scenario: acceptance of issue 9 — three background calls gated on
// channels and one quick inline call in one response: the quick result and
// the model's next turn happen before the slow ones finish; each slow
// result reaches the model exactly once; the run returns after the last.
func acceptance(t *testing.T, h Harness) {
	gates := []chan struct{}{make(chan struct{}), make(chan struct{}), make(chan struct{})}
	releases := make([]func(), 3)
	for i, g := range gates {
		releases[i] = closer(g)
		t.Cleanup(releases[i])
	}
	var slowDone atomic.Int32
	slow := func(i int) *tool.Tool {
		return tool.Func(fmt.Sprintf("slow%d", i), "", func(ctx context.Context, _ *tool.RunContext, _ struct{}) (string, error) {
			select {
			case <-gates[i]:
				slowDone.Add(1)
				return fmt.Sprintf("slow %d done", i), nil
			case <-ctx.Done():
				return "", ctx.Err()
			}
		}, bg())
	}
	quick := tool.Func("quick", "", func(context.Context, *tool.RunContext, struct{}) (string, error) { return "quick result", nil })
	var quickSeenEarly, turnBeforeSlow atomic.Bool
	m, rec := newModel(func(n int, req *llm.Request) *llm.Response {
		if n == 0 {
			return calls(call("slow0", "s0", "{}"), call("slow1", "s1", "{}"), call("quick", "q", "{}"), call("slow2", "s2", "{}"))
		}
		k := len(followUps(req))
		if n == 1 {
			quickSeenEarly.Store(toolReturns(req)["q"] == "quick result" && slowDone.Load() == 0)
			turnBeforeSlow.Store(k == 0 && slowDone.Load() == 0)
		}
		if k == 3 {
			return text("done")
		}
		releases[k]() // one more slow call may finish
		return text(fmt.Sprintf("working, %d of 3 back", k))
	})
	var ev events
	res, err := newAgent(t, h, m, setup{}, slow(0), slow(1), quick, slow(2)).Run(runCtx(t), "go", &agent.RunOptions{OnEvent: ev.add})
	if err != nil || res.Output != "done" {
		t.Fatalf("%v output %q", err, res.Output)
	}
	if !quickSeenEarly.Load() || !turnBeforeSlow.Load() {
		t.Error("the quick result or the model's next turn waited for a slow call")
	}
	reqs := rec.requests()
	ids := acks(reqs[1])
	last := reqs[len(reqs)-1]
	for _, c := range []string{"s0", "s1", "s2"} {
		n := 0
		for _, fu := range followUpTexts(last) {
			if strings.Contains(fu, "(task "+ids[c]+") completed.") {
				n++
			}
		}
		if ids[c] == "" || n != 1 {
			t.Errorf("call %s (task %q) delivered %d times", c, ids[c], n)
		}
	}
	if fin := ev.ofType(agent.EventBackgroundTaskFinished); len(fin) != 3 || slowDone.Load() != 3 {
		t.Errorf("run returned with %d tasks finished", len(fin))
	}
}
