// Scenarios of non-blocking deferred calls (SPEC §12, issue 26): an
// approval-gated call that does not stop the run, decided through
// background.Decisions while the run goes on; once approved it runs with the
// harness's executor.

package bgtest

import (
	"context"
	"errors"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/offload-dev/offload/internal/offloadtest"
	"github.com/offload-dev/offload/pkg/agent"
	"github.com/offload-dev/offload/pkg/agent/background"
	"github.com/offload-dev/offload/pkg/deferred"
	"github.com/offload-dev/offload/pkg/llm"
	"github.com/offload-dev/offload/pkg/message"
	"github.com/offload-dev/offload/pkg/tool"
)

var waitAckRE = regexp.MustCompile(`^Tool '([A-Za-z0-9_-]+)' is waiting for a person's approval as task ([0-9A-Z]{26})\. The outcome will arrive later as a follow-up message; continue with other work meanwhile\.$`)

// waitAcks returns the task IDs of the non-blocking acknowledgements in
// req, by tool call ID.
func waitAcks(req *llm.Request) map[string]string {
	out := map[string]string{}
	for id, text := range toolReturns(req) {
		if m := waitAckRE.FindStringSubmatch(text); m != nil {
			out[id] = m[2]
		}
	}
	return out
}

// userTexts returns the first text of every user prompt in req after the
// first one (the run's prompt).
func userTexts(req *llm.Request) []string {
	var out []string
	for _, m := range req.Messages {
		for _, p := range m.Parts {
			if u, ok := p.(message.UserPrompt); ok && len(u.Content) > 0 {
				out = append(out, u.Content[0].Text)
			}
		}
	}
	if len(out) > 0 {
		out = out[1:]
	}
	return out
}

// counted is an approval-gated tool that counts its executions.
func counted(name string, runs *atomic.Int32) *tool.Tool {
	return tool.Func(name, "", func(context.Context, *tool.RunContext, struct{}) (string, error) {
		runs.Add(1)
		return name + " done", nil
	}, tool.NeedsApproval())
}

// nonBlocking is the setup of a run with every approval non-blocking,
// decided through d.
func nonBlocking(d *background.Decisions, cfg agent.Config) setup {
	return setup{cfg: cfg, caps: func(exec background.Executor) []agent.Capability {
		return []agent.Capability{background.Tools(background.Config{Executor: exec,
			NonBlocking: &background.NonBlockingConfig{Tools: background.SelectAll(), Waiter: d}})}
	}}
}

// Scenario (issue 26's acceptance): a gated call and an ordinary one in
// one response. The next request carries the ordinary result and the gated
// call's acknowledgement while no decision exists, and the gated tool has
// not run; the decision, given then, reaches the model as the follow-up of
// the tool's result, and the tool ran once.
func nonBlockingApproval(t *testing.T, h Harness) {
	var deploys atomic.Int32
	deploy := counted("deploy", &deploys)
	lookup := tool.Func("lookup", "", func(context.Context, *tool.RunContext, struct{}) (string, error) { return "found", nil })
	d := background.NewDecisions()
	asked := make(chan string, 1)
	m, rec := newModel(func(n int, req *llm.Request) *llm.Response {
		switch n {
		case 0:
			return calls(call("deploy", "c1", "{}"), call("lookup", "c2", "{}"))
		case 1:
			asked <- waitAcks(req)["c1"]
			return text("waiting")
		}
		if hasFollowUp(req, "Background tool 'deploy'") {
			return text("done")
		}
		return text("waiting")
	})
	a := newAgent(t, h, m, nonBlocking(d, agent.Config{}), deploy, lookup)
	type ran struct {
		res *agent.Result
		err error
	}
	out := make(chan ran, 1)
	go func() {
		res, err := a.Run(runCtx(t), "go", nil)
		out <- ran{res, err}
	}()
	var task string
	select {
	case task = <-asked:
	case r := <-out:
		t.Fatalf("the run returned before its second request: %v", r.err)
	}
	second := rec.requests()[1]
	if got := toolReturns(second)["c2"]; got != "found" {
		t.Errorf("lookup's result in the second request = %q, want found", got)
	}
	if task == "" {
		t.Fatalf("no acknowledgement of the gated call in the second request: %v", toolReturns(second))
	}
	if n := deploys.Load(); n != 0 {
		t.Fatalf("deploy ran %d times before its decision", n)
	}
	if err := d.Decide(task, true); err != nil {
		t.Fatal(err)
	}
	r := offloadtest.WaitOrTimeout(t, out, "the run to return")
	if r.err != nil {
		t.Fatal(r.err)
	}
	if r.res.Output != "done" {
		t.Errorf("output = %q, want done", r.res.Output)
	}
	if n := deploys.Load(); n != 1 {
		t.Errorf("deploy ran %d times, want 1", n)
	}
	last := rec.requests()[rec.count()-1]
	want := "Background tool 'deploy' (task " + task + ") completed.\nResult: deploy done"
	if got := followUpTexts(last); len(got) != 1 || got[0] != want {
		t.Errorf("follow-ups = %q, want [%q]", got, want)
	}
	if r.res.Usage.ToolCalls != 2 {
		t.Errorf("tool_calls = %d, want 2", r.res.Usage.ToolCalls)
	}
}

// Scenario: with tool_calls limit 1 and a non-blocking call waiting, a
// second call is refused with the limit's error; neither tool ran.
func nonBlockingHoldsSlot(t *testing.T, h Harness) {
	var deploys, lookups atomic.Int32
	deploy := counted("deploy", &deploys)
	lookup := tool.Func("lookup", "", func(context.Context, *tool.RunContext, struct{}) (string, error) {
		lookups.Add(1)
		return "found", nil
	})
	d := background.NewDecisions()
	m, _ := newModel(func(n int, _ *llm.Request) *llm.Response {
		if n == 0 {
			return calls(call("deploy", "c1", "{}"))
		}
		return calls(call("lookup", "c2", "{}"))
	})
	_, err := newAgent(t, h, m, nonBlocking(d, agent.Config{Limits: agent.UsageLimits{ToolCalls: agent.Limit(1)}}), deploy, lookup).Run(runCtx(t), "go", nil)
	var ule *agent.UsageLimitExceeded
	if !errors.As(err, &ule) || ule.Limit != "tool_calls_limit" {
		t.Fatalf("err = %v, want the tool_calls_limit", err)
	}
	if !strings.Contains(err.Error(), "tool_calls_limit") {
		t.Errorf("err = %q", err)
	}
	if deploys.Load() != 0 || lookups.Load() != 0 {
		t.Errorf("deploy ran %d, lookup %d times, want 0", deploys.Load(), lookups.Load())
	}
}

// Scenario: a denial and an expiry reach the model each with its own
// text; the tool never runs and the calls give their slots back.
func nonBlockingDenialAndExpiry(t *testing.T, h Harness) {
	var deploys atomic.Int32
	deploy := counted("deploy", &deploys)
	d := background.NewDecisions()
	asked := make(chan map[string]string, 1)
	m, _ := newModel(func(n int, req *llm.Request) *llm.Response {
		if n == 0 {
			return calls(call("deploy", "c1", "{}"), call("deploy", "c2", "{}"))
		}
		if n == 1 {
			asked <- waitAcks(req)
			return text("waiting")
		}
		got := userTexts(req)
		if len(got) == 2 {
			return text("done")
		}
		return text("waiting")
	})
	a := newAgent(t, h, m, nonBlocking(d, agent.Config{}), deploy)
	type ran struct {
		res *agent.Result
		err error
	}
	out := make(chan ran, 1)
	go func() {
		res, err := a.Run(runCtx(t), "go", nil)
		out <- ran{res, err}
	}()
	ids := offloadtest.WaitOrTimeout(t, asked, "the acknowledgements")
	if len(ids) != 2 {
		t.Fatalf("acknowledged tasks = %v, want two", ids)
	}
	if err := d.Decide(ids["c1"], deferred.ToolDenied{Message: "not today"}); err != nil {
		t.Fatal(err)
	}
	if err := d.Decide(ids["c2"], background.ApprovalExpired{}); err != nil {
		t.Fatal(err)
	}
	want := []string{
		"Tool 'deploy' (task " + ids["c1"] + ") was denied: not today",
		"Tool 'deploy' (task " + ids["c2"] + ") was not approved in time: " + background.DefaultExpiry,
	}
	r := offloadtest.WaitOrTimeout(t, out, "the run to return")
	if r.err != nil {
		t.Fatal(r.err)
	}
	var texts []string
	for _, msg := range r.res.Messages {
		for _, p := range msg.Parts {
			if u, ok := p.(message.UserPrompt); ok && len(u.Content) > 0 && strings.HasPrefix(u.Content[0].Text, "Tool 'deploy' (task ") {
				texts = append(texts, u.Content[0].Text)
			}
		}
	}
	if len(texts) != 2 || !sameSet(texts, want) {
		t.Errorf("follow-ups = %q, want %q", texts, want)
	}
	if deploys.Load() != 0 {
		t.Errorf("deploy ran %d times, want 0", deploys.Load())
	}
	if r.res.Usage.ToolCalls != 0 {
		t.Errorf("tool_calls = %d, want 0", r.res.Usage.ToolCalls)
	}
}

func sameSet(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	seen := map[string]int{}
	for _, s := range a {
		seen[s]++
	}
	for _, s := range b {
		seen[s]--
	}
	for _, n := range seen {
		if n != 0 {
			return false
		}
	}
	return true
}

// Scenario: a run that allows deferred results pauses when the model ends
// its turn with only non-blocking calls waiting; they are listed in
// Result.Background. The decision given meanwhile reaches the later run as
// an adopted outcome: the tool runs once and its result is the follow-up.
func nonBlockingPauseThenResume(t *testing.T, h Harness) {
	var deploys atomic.Int32
	deploy := counted("deploy", &deploys)
	d := background.NewDecisions()
	m, _ := newModel(func(n int, req *llm.Request) *llm.Response {
		if n == 0 {
			return calls(call("deploy", "c1", "{}"))
		}
		if hasFollowUp(req, "Background tool 'deploy'") {
			return text("done")
		}
		return text("waiting")
	})
	a := newAgent(t, h, m, nonBlocking(d, agent.Config{AllowDeferred: true}), deploy)
	res, err := a.Run(runCtx(t), "go", nil)
	if err != nil {
		t.Fatal(err)
	}
	if !res.Paused() || len(res.Background) != 1 {
		t.Fatalf("paused = %v, background = %+v, want paused with one waiting call", res.Paused(), res.Background)
	}
	pt := res.Background[0]
	if pt.Kind != deferred.KindApproval || !pt.NonBlocking || pt.Tool != "deploy" {
		t.Errorf("pending = %+v, want a non-blocking approval of deploy", pt)
	}
	if deploys.Load() != 0 {
		t.Fatalf("deploy ran %d times before its decision", deploys.Load())
	}
	res2, err := a.Run(runCtx(t), "", &agent.RunOptions{History: res.Messages, AllowDeferred: true,
		Background: []agent.AdoptedTask{{Task: pt, Done: true, Value: true}}})
	if err != nil {
		t.Fatal(err)
	}
	if res2.Output != "done" || res2.Paused() {
		t.Errorf("output = %q, paused = %v, want done", res2.Output, res2.Paused())
	}
	if n := deploys.Load(); n != 1 {
		t.Errorf("deploy ran %d times, want 1", n)
	}
}
