// Scenario of the delivery order of tasks started in successive steps.

package bgtest

import (
	"context"
	"strings"
	"testing"

	"github.com/offload-dev/offload/pkg/agent"
	"github.com/offload-dev/offload/pkg/llm"
	"github.com/offload-dev/offload/pkg/tool"
)

// completionOrderAcrossSteps: a task started alone, then a second one
// started in the next step that finishes first, are delivered in
// completion order, whether or not anyone observes the run's events (an
// unobserved run starts a task that runs alone without a watcher
// goroutine and gives it one when the second starts).
func completionOrderAcrossSteps(t *testing.T, h Harness) {
	for _, observed := range []bool{false, true} {
		gate := make(chan struct{})
		release := closer(gate)
		t.Cleanup(release)
		m, rec := newModel(func(n int, req *llm.Request) *llm.Response {
			switch fu := followUpTexts(req); {
			case n == 0:
				return calls(call("slow", "c1", "{}"))
			case n == 1:
				return calls(call("quick", "c2", "{}"))
			case len(fu) >= 2:
				return text("done")
			case len(fu) == 1:
				release() // quick has arrived: now slow may finish
			}
			return text("waiting")
		})
		quick := tool.Func("quick", "", func(_ context.Context, _ *tool.RunContext, _ struct{}) (string, error) { return "fast", nil }, bg())
		a := newAgent(t, h, m, setup{}, gated("slow", "late", gate, nil, bg()), quick)
		var opts *agent.RunOptions
		ev := &events{}
		if observed {
			opts = &agent.RunOptions{OnEvent: ev.add}
		}
		res, err := a.Run(runCtx(t), "go", opts)
		if err != nil {
			t.Fatal(err)
		}
		if res.Output != "done" {
			t.Fatalf("observed=%v: output %q", observed, res.Output)
		}
		reqs := rec.requests()
		fu := followUpTexts(reqs[len(reqs)-1])
		if len(fu) != 2 || !strings.HasPrefix(fu[0], "Background tool 'quick'") || !strings.HasPrefix(fu[1], "Background tool 'slow'") {
			t.Errorf("observed=%v: follow-ups %q, want quick's then slow's", observed, fu)
		}
		if observed && len(ev.ofType(agent.EventBackgroundTaskFinished)) != 2 {
			t.Errorf("finished events: %+v", ev.ofType(agent.EventBackgroundTaskFinished))
		}
	}
}
