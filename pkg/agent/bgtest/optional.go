// Scenarios of the optional run_in_background flag and tool selectors.

package bgtest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/offload-dev/offload/pkg/agent"
	"github.com/offload-dev/offload/pkg/agent/background"
	"github.com/offload-dev/offload/pkg/llm"
	"github.com/offload-dev/offload/pkg/message"
	"github.com/offload-dev/offload/pkg/tool"
)

// Scenario: test_unmarked_tool_runs_normally
func unmarkedRunsNormally(t *testing.T, h Harness) {
	plain := tool.Func("plain", "", func(context.Context, *tool.RunContext, struct{}) (string, error) { return "plain result", nil })
	m, rec := newModel(func(n int, _ *llm.Request) *llm.Response {
		if n == 0 {
			return calls(call("plain", "c1", "{}"))
		}
		return text("done")
	})
	var ev events
	if _, err := newAgent(t, h, m, setup{}, plain).Run(runCtx(t), "go", &agent.RunOptions{OnEvent: ev.add}); err != nil {
		t.Fatal(err)
	}
	req := rec.requests()[1]
	if got := toolReturns(req)["c1"]; got != "plain result" {
		t.Errorf("return = %q", got)
	}
	if len(acks(req)) != 0 || len(followUps(req)) != 0 || len(ev.ofType(agent.EventBackgroundTaskStarted)) != 0 {
		t.Error("an unmarked tool ran in the background")
	}
}

// Scenario: test_multiple_capabilities_combine_selectors_without_double_execution
func combineCapabilities(t *testing.T, h Harness) {
	var mu sync.Mutex
	counts := map[string]int{}
	counted := func(name string, opts ...tool.Option) *tool.Tool {
		return tool.Func(name, "", func(context.Context, *tool.RunContext, struct{}) (string, error) {
			mu.Lock()
			counts[name]++
			mu.Unlock()
			return name + " ok", nil
		}, opts...)
	}
	m, rec := newModel(untilFollowUps(3, calls(call("first", "c1", "{}"), call("shared", "c2", "{}"), call("second", "c3", "{}"), call("plain", "c4", "{}"))))
	caps := func(exec background.Executor) []agent.Capability {
		return []agent.Capability{
			background.Tools(background.Config{Tools: background.SelectNames("first", "shared"), Executor: exec}),
			background.Tools(background.Config{Tools: background.SelectNames("shared", "second"), Executor: exec}),
		}
	}
	if _, err := newAgent(t, h, m, setup{caps: caps}, counted("first"), counted("shared"), counted("second"), counted("plain")).Run(runCtx(t), "go", nil); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if counts["first"] != 1 || counts["shared"] != 1 || counts["second"] != 1 || counts["plain"] != 1 {
		t.Errorf("calls = %v", counts)
	}
	reqs := rec.requests()
	if a := acks(reqs[1]); len(a) != 3 || a["c4"] != "" {
		t.Errorf("acks = %v", a)
	}
	if got := toolReturns(reqs[1])["c4"]; got != "plain ok" {
		t.Errorf("plain = %q", got)
	}
	if sys := reqs[0].Messages[0].Parts[0]; strings.Count(fmt.Sprint(sys), "follow-up message") != 1 {
		t.Errorf("instructions repeated: %v", sys)
	}
}

type queryArgs struct {
	Query string `json:"query"`
}

func research(opts ...tool.Option) *tool.Tool {
	return tool.Func("research", "", func(_ context.Context, _ *tool.RunContext, a queryArgs) (string, error) {
		return "researched " + a.Query, nil
	}, opts...)
}

// Scenario: test_only_optional_tools_advertise_run_in_background
func onlyOptionalAdvertise(t *testing.T, h Harness) {
	plain := tool.Func("plain", "", func(context.Context, *tool.RunContext, queryArgs) (string, error) { return "", nil })
	always := tool.Func("always", "", func(context.Context, *tool.RunContext, queryArgs) (string, error) { return "", nil }, bg())
	m, rec := newModel(func(int, *llm.Request) *llm.Response { return text("hi") })
	if _, err := newAgent(t, h, m, setup{}, research(optional()), plain, always).Run(runCtx(t), "go", nil); err != nil {
		t.Fatal(err)
	}
	for _, d := range rec.requests()[0].Tools {
		var schema struct {
			Properties map[string]json.RawMessage `json:"properties"`
			Required   []string                   `json:"required"`
		}
		if err := json.Unmarshal(d.Parameters, &schema); err != nil {
			t.Fatal(err)
		}
		flag, has := schema.Properties["run_in_background"]
		if has != (d.Name == "research") {
			t.Errorf("%s advertises run_in_background: %v", d.Name, has)
		}
		if has {
			var got, want any
			_ = json.Unmarshal(flag, &got)
			_ = json.Unmarshal([]byte(`{"type":"boolean","description":"Set to true to keep working and get the result later as a follow-up message."}`), &want)
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("flag schema %s", flag)
			}
			for _, r := range schema.Required {
				if r == "run_in_background" {
					t.Error("the flag is required")
				}
			}
		}
	}
}

// Scenario: test_model_opting_in_runs_tool_in_background
func optingIn(t *testing.T, h Harness) {
	m, rec := newModel(untilFollowUps(1, calls(call("research", "c1", `{"query":"topic","run_in_background":true}`))))
	if _, err := newAgent(t, h, m, setup{}, research(optional())).Run(runCtx(t), "go", nil); err != nil {
		t.Fatal(err)
	}
	reqs := rec.requests()
	id := acks(reqs[1])["c1"]
	last := reqs[len(reqs)-1]
	want := fmt.Sprintf("Background tool 'research' (task %s) completed.\nResult: researched topic", id)
	if fu := followUpTexts(last); id == "" || len(fu) != 1 || fu[0] != want {
		t.Errorf("follow-ups = %q, want [%q]", fu, want)
	}
}

// Scenario: test_model_omitting_flag_runs_tool_inline
func omittingFlag(t *testing.T, h Harness) {
	m, rec := newModel(untilFollowUps(1, calls(call("research", "c1", `{"query":"topic"}`))))
	res, err := newAgent(t, h, m, setup{}, research(optional())).Run(runCtx(t), "go", nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := toolReturns(rec.requests()[1])["c1"]; got != "researched topic" || res.Output != "waiting" {
		t.Errorf("return %q output %q", got, res.Output)
	}
}

// Scenario: test_always_background_selector_wins_over_optional_metadata
func selectorWins(t *testing.T, h Harness) {
	m, rec := newModel(untilFollowUps(1, calls(call("research", "c1", `{"query":"topic"}`))))
	caps := func(exec background.Executor) []agent.Capability {
		return []agent.Capability{background.Tools(background.Config{Tools: background.SelectNames("research"), Executor: exec})}
	}
	if _, err := newAgent(t, h, m, setup{caps: caps}, research(optional())).Run(runCtx(t), "go", nil); err != nil {
		t.Fatal(err)
	}
	reqs := rec.requests()
	if strings.Contains(string(reqs[0].Tools[0].Parameters), "run_in_background") {
		t.Error("the flag is advertised for an always-background tool")
	}
	if acks(reqs[1])["c1"] == "" {
		t.Error("the call did not run in the background")
	}
}

// Scenario: test_optional_tool_with_existing_run_in_background_parameter_is_rejected
func existingFlagRejected(t *testing.T, h Harness) {
	type own struct {
		RunInBackground bool `json:"run_in_background"`
	}
	clash := tool.Func("clash", "", func(context.Context, *tool.RunContext, own) (string, error) { return "", nil }, optional())
	m, rec := newModel(func(int, *llm.Request) *llm.Response { return text("never") })
	_, err := newAgent(t, h, m, setup{}, clash).Run(runCtx(t), "go", nil)
	var ue *agent.UserError
	if !errors.As(err, &ue) || err.Error() != "Tool 'clash' already has a 'run_in_background' parameter, so it cannot be an optional background tool." {
		t.Fatalf("err = %v", err)
	}
	if rec.count() != 0 {
		t.Error("the model was called")
	}
}

// Scenario: test_invalid_args_for_optional_tool_are_retried
func invalidArgsRetried(t *testing.T, h Harness) {
	for _, c := range []struct{ name, args, want string }{
		{"not-json", `{`, "Invalid arguments"},
		{"not-object", `[]`, "Invalid arguments"},
		{"flag-not-boolean", `{"query":"topic","run_in_background":"yes"}`, "`run_in_background` must be true or false."},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			m, rec := newModel(func(n int, _ *llm.Request) *llm.Response {
				switch n {
				case 0:
					return calls(call("research", "c1", c.args))
				case 1:
					return calls(call("research", "c2", `{"query":"topic"}`))
				default:
					return text("done")
				}
			})
			if _, err := newAgent(t, h, m, setup{}, research(optional())).Run(runCtx(t), "go", nil); err != nil {
				t.Fatal(err)
			}
			reqs := rec.requests()
			var retry *message.RetryPrompt
			for _, p := range reqs[1].Messages[len(reqs[1].Messages)-1].Parts {
				if r, ok := p.(message.RetryPrompt); ok {
					retry = &r
				}
			}
			if retry == nil || !strings.HasPrefix(retry.Content, c.want) {
				t.Fatalf("retry = %+v", retry)
			}
			if got := toolReturns(reqs[2])["c2"]; got != "researched topic" {
				t.Errorf("second call = %q", got)
			}
		})
	}
}
