package background_test

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/offload-dev/offload/internal/offloadtest"
	"github.com/offload-dev/offload/pkg/agent"
	"github.com/offload-dev/offload/pkg/agent/background"
	"github.com/offload-dev/offload/pkg/deferred"
	"github.com/offload-dev/offload/pkg/llm"
	"github.com/offload-dev/offload/pkg/tool"
)

// chargeWorld is a background tool whose first attempt ends as a worker
// answers an attempt it found started by a worker that stopped (SPEC §13:
// an unknown effect); its later attempts run.
type chargeWorld struct {
	mu       sync.Mutex
	attempts []int // the attempts that ran
}

func (w *chargeWorld) tool() *tool.Tool {
	return tool.Func("charge", "", func(_ context.Context, rc *tool.RunContext, _ struct{}) (string, error) {
		if rc.Attempt == 0 {
			return "", &tool.ApprovalRequired{Metadata: map[string]any{tool.EffectMetaKey: tool.EffectUnknown, "worker": "w1"}}
		}
		w.mu.Lock()
		w.attempts = append(w.attempts, rc.Attempt)
		w.mu.Unlock()
		return "charged", nil
	}, tool.Meta(map[string]any{"background": true}))
}

// A background call whose outcome is unknown reaches a person as a
// non-blocking approval (offload.effect unknown, the task's next attempt)
// while the run goes on; approved, it runs again as that attempt, once,
// and its result is the call's follow-up; denied, the follow-up is SPEC
// §13's text with the person's reason. Without a waiter, the follow-up
// says the outcome is unknown.
func TestBackgroundUnknownEffectAsksAPerson(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		decision any
		want     string
		runs     int
	}{
		{"approved", true, " completed.\nResult: charged", 1},
		{"denied", deferred.ToolDenied{Message: "Check the ledger."}, ": The outcome of tool 'charge' is unknown: its worker stopped while running it, and it was not run again. Check the ledger.", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			w := &chargeWorld{}
			d := background.NewDecisions()
			m := model(func(n int, req *llm.Request) *llm.Response {
				if n == 0 {
					return calls(call("charge", "c1", "{}"))
				}
				if strings.Contains(lastUserText(req), "Background tool 'charge'") {
					return text("done")
				}
				return text("waiting")
			})
			a := newAgentCfg(t, agent.Config{Model: m, Capabilities: []agent.Capability{background.Tools(background.Config{
				NonBlocking: &background.NonBlockingConfig{Waiter: d}})}}, w.tool())
			var mu sync.Mutex
			var requested []*deferred.Requests
			out := make(chan error, 1)
			go func() {
				_, err := a.Run(t.Context(), "go", &agent.RunOptions{OnEvent: func(e agent.Event) {
					if e.Type == agent.EventDeferredToolRequests {
						mu.Lock()
						requested = append(requested, e.Requests)
						mu.Unlock()
					}
				}})
				out <- err
			}()
			asked, signal := d.Asked()
			for len(asked) == 0 {
				offloadtest.WaitOrTimeout(t, signal, "the call asked of a person")
				asked, signal = d.Asked()
			}
			pt := asked[0]
			if pt.Kind != deferred.KindApproval || !pt.NonBlocking || pt.Attempt != 1 || pt.Metadata[tool.EffectMetaKey] != tool.EffectUnknown || pt.ToolCallID != "c1" {
				t.Fatalf("asked %+v, want the call's unknown effect, its next attempt", pt)
			}
			if err := d.Decide(pt.TaskID, tc.decision); err != nil {
				t.Fatal(err)
			}
			if err := offloadtest.WaitOrTimeout(t, out, "the run's end"); err != nil {
				t.Fatal(err)
			}
			want := "Background tool 'charge' (task " + pt.TaskID + ")" + tc.want
			if got := lastUserText(m.Requests()[len(m.Requests())-1]); got != want {
				t.Errorf("follow-up %q, want %q", got, want)
			}
			w.mu.Lock()
			if len(w.attempts) != tc.runs || tc.runs == 1 && w.attempts[0] != 1 {
				t.Errorf("attempts run %v, want %d of attempt 1", w.attempts, tc.runs)
			}
			w.mu.Unlock()
			mu.Lock()
			defer mu.Unlock()
			if len(requested) != 1 || len(requested[0].Approvals) != 1 || requested[0].TaskIDs["c1"] != pt.TaskID {
				t.Errorf("deferred_tool_requests events %+v, want the call once", requested)
			}
		})
	}
	t.Run("no waiter", func(t *testing.T) {
		t.Parallel()
		w := &chargeWorld{}
		m := model(func(n int, req *llm.Request) *llm.Response {
			if n == 0 {
				return calls(call("charge", "c1", "{}"))
			}
			if strings.Contains(lastUserText(req), "Background tool 'charge'") {
				return text("done")
			}
			return text("waiting")
		})
		a := newAgentCfg(t, agent.Config{Model: m, Capabilities: []agent.Capability{background.Tools(background.Config{})}}, w.tool())
		if _, err := a.Run(t.Context(), "go", nil); err != nil {
			t.Fatal(err)
		}
		got := lastUserText(m.Requests()[len(m.Requests())-1])
		if !strings.HasSuffix(got, "): The outcome of tool 'charge' is unknown: its worker stopped while running it, and it was not run again.") {
			t.Errorf("follow-up %q", got)
		}
	})
}
