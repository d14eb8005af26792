package agent_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/offload-dev/offload/pkg/agent"
	"github.com/offload-dev/offload/pkg/deferred"
	"github.com/offload-dev/offload/pkg/message"
	"github.com/offload-dev/offload/pkg/tool"
)

func handler(fn func(reqs *deferred.Requests) *deferred.Results) agent.Capability {
	return agent.HandleDeferredToolCalls(func(_ context.Context, _ *tool.RunContext, reqs *deferred.Requests) (*deferred.Results, error) {
		return fn(reqs), nil
	})
}

func approvals(kv ...any) map[string]any {
	m := map[string]any{}
	for i := 0; i < len(kv); i += 2 {
		m[kv[i].(string)] = kv[i+1] //nolint:gosec // G602: kv comes in pairs; an odd count is a broken test, and panics
	}
	return m
}

func TestHandleDeferredToolCalls(t *testing.T) {
	t.Parallel()
	ext := func(t *testing.T) tool.Toolset {
		s, err := tool.External(tool.Def{Name: "ext"})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	cases := []struct {
		name      string
		calls     []message.ToolCall
		handlers  []agent.Capability
		allow     bool
		wantErr   string
		wantParts string // "kind:content" of the request after the step
		wantLeft  string // remaining approvals|calls ids
		wantCalls int    // model calls
	}{
		// Scenario: test_deferred_tool_handler_approve
		// Scenario: test_deferred_tool_handler_no_output_type_needed (no AllowDeferred: all resolved, the run goes on)
		{name: "approve", calls: []message.ToolCall{call("gated", "a", `{"x":1}`)}, handlers: []agent.Capability{handler(func(r *deferred.Requests) *deferred.Results {
			return &deferred.Results{Approvals: approvals("a", true)}
		})}, wantParts: "tool-return[success]:42", wantCalls: 2},
		// Scenario: test_deferred_tool_handler_deny
		{name: "deny", calls: []message.ToolCall{call("gated", "a", `{"x":1}`)}, handlers: []agent.Capability{handler(func(r *deferred.Requests) *deferred.Results {
			return &deferred.Results{Approvals: approvals("a", deferred.ToolDenied{Message: "Not allowed."})}
		})}, wantParts: "tool-return[denied]:Not allowed.", wantCalls: 2},
		// Scenario: test_deferred_tool_handler_denied_via_batch
		{name: "denied via batch", calls: []message.ToolCall{call("gated", "a", `{"x":1}`)}, handlers: []agent.Capability{handler(func(r *deferred.Requests) *deferred.Results {
			res, err := r.BuildResults(approvals("a", deferred.ToolDenied{Message: "Denied by batch handler."}), nil, nil, false)
			if err != nil {
				panic(err)
			}
			return res
		})}, wantParts: "tool-return[denied]:Denied by batch handler.", wantCalls: 2},
		// Scenario: test_deferred_tool_handler_approved_tool_raises_model_retry
		{name: "approved tool raises model retry", calls: []message.ToolCall{call("retrying", "a", `{}`)}, handlers: []agent.Capability{handler(func(r *deferred.Requests) *deferred.Results {
			return &deferred.Results{Approvals: approvals("a", true)}
		})}, wantParts: "retry-prompt:bad x", wantCalls: 2},
		// Scenario: test_deferred_tool_handler_batch_deny_via_bool_and_default
		{name: "deny bool and default", calls: []message.ToolCall{call("gated", "a", `{"x":1}`), call("gated", "b", `{"x":1}`)}, handlers: []agent.Capability{handler(func(r *deferred.Requests) *deferred.Results {
			return &deferred.Results{Approvals: approvals("a", false, "b", deferred.ToolDenied{})}
		})}, wantParts: "tool-return[denied]:The tool call was denied.|tool-return[denied]:The tool call was denied.", wantCalls: 2},
		// Scenario: test_deferred_tool_handler_none_fallback
		{name: "none falls back to pause", calls: []message.ToolCall{call("gated", "a", `{"x":1}`)}, allow: true, handlers: []agent.Capability{handler(func(*deferred.Requests) *deferred.Results { return nil })}, wantLeft: "a|", wantCalls: 1},
		// Scenario: test_deferred_tool_handler_partial_resolution
		{name: "partial", calls: []message.ToolCall{call("gated", "a", `{"x":1}`), call("gated", "b", `{"x":2}`)}, allow: true, handlers: []agent.Capability{handler(func(r *deferred.Requests) *deferred.Results {
			return &deferred.Results{Approvals: approvals("a", true)}
		})}, wantParts: "tool-return[success]:42", wantLeft: "b|", wantCalls: 1},
		// Scenario: test_deferred_tool_handler_accumulation
		{name: "accumulation", calls: []message.ToolCall{call("gated", "a", `{"x":1}`), call("gated", "b", `{"x":2}`)}, handlers: []agent.Capability{
			handler(func(r *deferred.Requests) *deferred.Results {
				return &deferred.Results{Approvals: approvals("a", true)}
			}),
			handler(func(r *deferred.Requests) *deferred.Results {
				if len(r.Approvals) != 1 || r.Approvals[0].ToolCallID != "b" {
					return nil // the second handler must see only b
				}
				return &deferred.Results{Approvals: approvals("b", true)}
			}),
		}, wantParts: "tool-return[success]:42|tool-return[success]:84", wantCalls: 2},
		// Scenario: test_deferred_tool_handler_unresolved_no_output_type_error
		{name: "empty results without pause allowed", calls: []message.ToolCall{call("gated", "a", `{"x":1}`)}, handlers: []agent.Capability{handler(func(*deferred.Requests) *deferred.Results { return &deferred.Results{} })}, wantErr: "A deferred tool call was present"},
		// Scenario: test_deferred_tool_handler_external_call
		{name: "external tool return with metadata", calls: []message.ToolCall{call("ext", "e", `{}`)}, handlers: []agent.Capability{handler(func(r *deferred.Requests) *deferred.Results {
			return &deferred.Results{Calls: map[string]any{"e": tool.Return{Value: "done", Metadata: map[string]any{"k": "v"}}}}
		})}, wantParts: "tool-return[success]:done", wantCalls: 2},
		// Scenario: test_deferred_tool_handler_external_call_plain_value
		{name: "external plain value", calls: []message.ToolCall{call("ext", "e", `{}`)}, handlers: []agent.Capability{handler(func(r *deferred.Requests) *deferred.Results {
			return &deferred.Results{Calls: map[string]any{"e": 7}}
		})}, wantParts: "tool-return[success]:7", wantCalls: 2},
		// Scenario: test_deferred_tool_handler_batch_external_model_retry
		{name: "external model retry", calls: []message.ToolCall{call("ext", "e", `{}`)}, handlers: []agent.Capability{handler(func(r *deferred.Requests) *deferred.Results {
			return &deferred.Results{Calls: map[string]any{"e": tool.Retry("again")}}
		})}, wantParts: "retry-prompt:again", wantCalls: 2},
		// Scenario: test_deferred_tool_handler_batch_external_retry_prompt_part
		{name: "external retry prompt part", calls: []message.ToolCall{call("ext", "e", `{}`)}, handlers: []agent.Capability{handler(func(r *deferred.Requests) *deferred.Results {
			return &deferred.Results{Calls: map[string]any{"e": message.RetryPrompt{ToolName: "wrong", ToolCallID: "wrong", Content: "fix"}}}
		})}, wantParts: "retry-prompt:fix", wantCalls: 2},
		// Scenario: test_deferred_tool_handler_approved_tool_override_args
		{name: "override args", calls: []message.ToolCall{call("gated", "a", `{"x":1}`)}, handlers: []agent.Capability{handler(func(r *deferred.Requests) *deferred.Results {
			return &deferred.Results{Approvals: approvals("a", deferred.ToolApproved{OverrideArgs: json.RawMessage(`{"x":3}`)})}
		})}, wantParts: "tool-return[success]:126", wantCalls: 2},
		// Scenario: test_deferred_tool_handler_build_results_helper
		{name: "build results approve all", calls: []message.ToolCall{call("gated", "a", `{"x":1}`), call("gated", "b", `{"x":1}`)}, handlers: []agent.Capability{handler(func(r *deferred.Requests) *deferred.Results {
			res, err := r.BuildResults(approvals("b", false), nil, nil, true)
			if err != nil {
				panic(err)
			}
			return res
		})}, wantParts: "tool-return[success]:42|tool-return[denied]:The tool call was denied.", wantCalls: 2},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m := turns(calls(tc.calls...), text("final"))
			retrying := tool.Func("retrying", "", func(context.Context, *tool.RunContext, struct{}) (int, error) { return 0, tool.Retry("bad x") }, tool.NeedsApproval())
			a := newAgentCfg(t, agent.Config{Model: m, AllowDeferred: tc.allow, Capabilities: tc.handlers, Toolsets: []tool.Toolset{ext(t)}}, times42("gated", tool.NeedsApproval()), retrying)
			res, err := a.Run(t.Context(), "go", nil)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if n := len(m.Requests()); n != tc.wantCalls {
				t.Errorf("model calls = %d, want %d", n, tc.wantCalls)
			}
			var stepReq message.Message
			for _, msg := range res.Messages[2:] {
				if msg.Role == message.RoleRequest {
					stepReq = msg
					break
				}
			}
			var got []string
			for _, p := range stepReq.Parts {
				switch x := p.(type) {
				case message.ToolReturn:
					got = append(got, "tool-return["+string(x.Outcome)+"]:"+x.ModelText())
				case message.RetryPrompt:
					got = append(got, "retry-prompt:"+x.Content)
					if x.ToolCallID != tc.calls[0].ToolCallID || x.ToolName != tc.calls[0].ToolName {
						t.Errorf("retry prompt not stamped: %+v", x)
					}
				}
			}
			if strings.Join(got, "|") != tc.wantParts {
				t.Errorf("parts = %s, want %s", strings.Join(got, "|"), tc.wantParts)
			}
			left := ""
			if res.Deferred != nil {
				var ap, cs []string
				for _, c := range res.Deferred.Approvals {
					ap = append(ap, c.ToolCallID)
				}
				for _, c := range res.Deferred.Calls {
					cs = append(cs, c.ToolCallID)
				}
				left = strings.Join(ap, ",") + "|" + strings.Join(cs, ",")
			}
			if left != tc.wantLeft {
				t.Errorf("remaining = %q, want %q", left, tc.wantLeft)
			}
		})
	}
}

// Scenario: test_deferred_tool_handler_re_deferred_with_metadata
// Scenario: test_deferred_tool_handler_re_deferred_as_call_deferred
// Scenario: test_deferred_tool_handler_mixed_unresolved_and_re_deferred
func TestHandlerReDeferred(t *testing.T) {
	t.Parallel()
	again := tool.Func("again", "", func(_ context.Context, rc *tool.RunContext, _ struct{}) (int, error) {
		if !rc.ToolCallApproved {
			return 0, &tool.ApprovalRequired{Metadata: map[string]any{"attempt": 1}}
		}
		return 0, &tool.ApprovalRequired{Metadata: map[string]any{"attempt": 2}}
	})
	toExt := tool.Func("to_ext", "", func(_ context.Context, rc *tool.RunContext, _ struct{}) (int, error) {
		if !rc.ToolCallApproved {
			return 0, &tool.ApprovalRequired{}
		}
		return 0, &tool.CallDeferred{Metadata: map[string]any{"reason": "external"}}
	})
	m := turns(calls(call("again", "a", `{}`), call("to_ext", "x", `{}`), call("gated", "u", `{"x":1}`)), text("final"))
	h := handler(func(r *deferred.Requests) *deferred.Results {
		return &deferred.Results{Approvals: approvals("a", true, "x", true)}
	})
	a := newAgentCfg(t, agent.Config{Model: m, AllowDeferred: true, Capabilities: []agent.Capability{h}}, again, toExt, times42("gated", tool.NeedsApproval()))
	var reqEvents int
	res, err := a.Run(t.Context(), "go", &agent.RunOptions{OnEvent: func(e agent.Event) {
		if e.Type == agent.EventDeferredToolRequests {
			reqEvents++
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	var ap, cs []string
	for _, c := range res.Deferred.Approvals {
		ap = append(ap, c.ToolCallID)
	}
	for _, c := range res.Deferred.Calls {
		cs = append(cs, c.ToolCallID)
	}
	if strings.Join(ap, ",") != "u,a" || strings.Join(cs, ",") != "x" {
		t.Errorf("remaining approvals %v calls %v", ap, cs)
	}
	if got := mustJSON(t, res.Deferred.Metadata); got != `{"a":{"attempt":2},"x":{"reason":"external"}}` {
		t.Errorf("metadata = %s", got)
	}
	if reqEvents != 1 {
		t.Errorf("deferred_tool_requests emitted %d times, want once per batch", reqEvents)
	}
}

// Scenario: test_deferred_tool_requests_and_results_events
// Scenario: test_tool_raises_call_deferred_approval_required_iter
// One batch mixing a normal call, a static approval, a conditional approval,
// an external call and a handler resolving part of them.
func TestEventOrderMixedBatch(t *testing.T) {
	t.Parallel()
	normal := tool.Func("normal", "", func(context.Context, *tool.RunContext, struct{}) (string, error) { return "n", nil })
	static := times42("static", tool.NeedsApproval())
	cond := tool.Func("cond", "", func(_ context.Context, rc *tool.RunContext, _ struct{}) (string, error) {
		if !rc.ToolCallApproved {
			return "", &tool.ApprovalRequired{Metadata: map[string]any{"why": "cond"}}
		}
		return "c", nil
	})
	ext, _ := tool.External(tool.Def{Name: "ext"})
	h := handler(func(r *deferred.Requests) *deferred.Results {
		return &deferred.Results{Approvals: approvals("s", true), Calls: map[string]any{"e": "from outside"}}
	})
	m := turns(calls(call("static", "s", `{"x":1}`), call("normal", "n", `{}`), call("ext", "e", `{}`), call("cond", "c", `{}`)), text("final"))
	a := newAgentCfg(t, agent.Config{Model: m, AllowDeferred: true, Capabilities: []agent.Capability{h}, Toolsets: []tool.Toolset{ext}}, normal, static, cond)
	var got []string
	res, err := a.Run(t.Context(), "go", &agent.RunOptions{OnEvent: func(e agent.Event) {
		s := string(e.Type)
		switch e.Type {
		case agent.EventToolCall, agent.EventToolResult:
			s += ":" + e.ToolCallID
		case agent.EventDeferredToolRequests:
			s += ":" + mustJSON(t, []any{len(e.Requests.Approvals), len(e.Requests.Calls), e.Requests.Approvals[0].ToolCallID})
		case agent.EventFinal:
			s += ":" + string(e.Final.Status)
		}
		got = append(got, s)
	}})
	if err != nil {
		t.Fatal(err)
	}
	want := "run_started,model_request_started," +
		"tool_call:n,tool_call:c,tool_result:n," + // function calls: validated in emission order, results as they complete
		"tool_call:e,tool_call:s," + // kind-deferred: external first, then approvals
		`deferred_tool_requests:[2,1,"c"],deferred_tool_results,` + // raised deferrals come first in their category
		"tool_result:s,tool_result:e,final:paused"
	if strings.Join(got, ",") != want {
		t.Errorf("events\n got %s\nwant %s", strings.Join(got, ","), want)
	}
	if len(res.Deferred.Approvals) != 1 || res.Deferred.Approvals[0].ToolCallID != "c" {
		t.Errorf("remaining = %+v", res.Deferred)
	}
	// The trailing request holds the results in emission order.
	var ids []string
	for _, p := range res.Messages[len(res.Messages)-1].Parts {
		ids = append(ids, p.(message.ToolReturn).ToolCallID)
	}
	if strings.Join(ids, ",") != "s,n,e" {
		t.Errorf("results order %v", ids)
	}
}

func TestHandlerErrorEndsRun(t *testing.T) {
	t.Parallel()
	boom := errors.New("approval service down")
	h := agent.HandleDeferredToolCalls(func(context.Context, *tool.RunContext, *deferred.Requests) (*deferred.Results, error) {
		return nil, boom
	})
	a := newAgentCfg(t, agent.Config{Model: turns(calls(call("gated", "a", `{"x":1}`))), Capabilities: []agent.Capability{h}}, times42("gated", tool.NeedsApproval()))
	if _, err := a.Run(t.Context(), "go", nil); !errors.Is(err, boom) {
		t.Fatalf("err = %v", err)
	}
}

// stepRequest returns the request that follows the first response of a run
// (the results of its tool calls).
func stepRequest(t *testing.T, res *agent.Result) message.Message {
	t.Helper()
	for _, msg := range res.Messages[2:] {
		if msg.Role == message.RoleRequest {
			return msg
		}
	}
	t.Fatalf("no request after the first response in %d messages", len(res.Messages))
	return message.Message{}
}

// Scenario: test_deferred_tool_handler_batch_external_tool_return_metadata
func TestHandlerBatchExternalToolReturnMetadata(t *testing.T) {
	t.Parallel()
	ext, err := tool.External(tool.Def{Name: "ext"})
	if err != nil {
		t.Fatal(err)
	}
	h := handler(func(r *deferred.Requests) *deferred.Results {
		res, err := r.BuildResults(nil, map[string]any{"e": tool.Return{Value: "done", Metadata: map[string]any{"source": "batch"}}}, nil, false)
		if err != nil {
			panic(err)
		}
		return res
	})
	m := turns(calls(call("ext", "e", `{}`)), text("final"))
	res, err := newAgentCfg(t, agent.Config{Model: m, Capabilities: []agent.Capability{h}, Toolsets: []tool.Toolset{ext}}).Run(t.Context(), "go", nil)
	if err != nil {
		t.Fatal(err)
	}
	p := stepRequest(t, res).Parts
	if len(p) != 1 {
		t.Fatalf("parts = %+v", p)
	}
	tr := p[0].(message.ToolReturn)
	if tr.ModelText() != "done" || tr.Outcome != message.OutcomeSuccess || mustJSON(t, tr.Metadata) != `{"source":"batch"}` {
		t.Errorf("return = %+v", tr)
	}
	if res.Output != "final" || res.Usage.ToolCalls != 0 {
		t.Errorf("output %q, tool_calls %d (a supplied result is no execution)", res.Output, res.Usage.ToolCalls)
	}
	wantRequests(t, m, 2)
}

// Scenario: test_deferred_tool_handler_approved_tool_returns_tool_return
func TestHandlerApprovedToolReturnsToolReturn(t *testing.T) {
	t.Parallel()
	gated := tool.Func("gated", "", func(context.Context, *tool.RunContext, xArgs) (tool.Return, error) {
		return tool.Return{Value: 42, Content: []message.Content{message.TextContent("see the attached report")}, Metadata: map[string]any{"report": "r1"}}, nil
	}, tool.NeedsApproval())
	h := handler(func(*deferred.Requests) *deferred.Results {
		return &deferred.Results{Approvals: approvals("a", true)}
	})
	m := turns(calls(call("gated", "a", `{"x":1}`)), text("final"))
	res, err := newAgentCfg(t, agent.Config{Model: m, Capabilities: []agent.Capability{h}}, gated).Run(t.Context(), "go", nil)
	if err != nil {
		t.Fatal(err)
	}
	p := stepRequest(t, res).Parts
	if len(p) != 2 {
		t.Fatalf("parts = %+v", p)
	}
	tr, ok := p[0].(message.ToolReturn)
	if !ok || tr.ModelText() != "42" || tr.Outcome != message.OutcomeSuccess || mustJSON(t, tr.Metadata) != `{"report":"r1"}` {
		t.Errorf("return = %+v", p[0])
	}
	if up, ok := p[1].(message.UserPrompt); !ok || len(up.Content) != 1 || up.Content[0].Text != "see the attached report" {
		t.Errorf("user content = %+v", p[1])
	}
	// The model is sent both.
	var kinds []string
	for _, q := range lastRequestParts(t, m, 1) {
		kinds = append(kinds, q.PartKind())
	}
	if strings.Join(kinds, ",") != "tool-return,user-prompt" {
		t.Errorf("model's request = %v", kinds)
	}
	if res.Output != "final" || res.Usage.ToolCalls != 1 {
		t.Errorf("output %q, tool_calls %d", res.Output, res.Usage.ToolCalls)
	}
	wantRequests(t, m, 2)
}

// Scenario: test_deferred_tool_handler_re_deferred_without_metadata
func TestHandlerReDeferredWithoutMetadata(t *testing.T) {
	t.Parallel()
	var runs atomic.Int32
	again := tool.Func("again", "", func(context.Context, *tool.RunContext, struct{}) (int, error) {
		runs.Add(1)
		return 0, &tool.ApprovalRequired{}
	})
	h := handler(func(*deferred.Requests) *deferred.Results {
		return &deferred.Results{Approvals: approvals("a", true)}
	})
	m := turns(calls(call("again", "a", `{}`)))
	var l eventLog
	res, err := newAgentCfg(t, agent.Config{Model: m, AllowDeferred: true, Capabilities: []agent.Capability{h}}, again).Run(t.Context(), "go", l.opts(nil))
	if err != nil {
		t.Fatal(err)
	}
	if idsOf(res.Deferred.Approvals) != "[a]" || len(res.Deferred.Calls) != 0 || mustJSON(t, res.Deferred.Metadata) != `{}` {
		t.Errorf("remaining = %+v", res.Deferred)
	}
	// Announced once; the approved run deferred again without a result.
	wantEvents(t, &l,
		"model_request_started",
		"tool_call:a:valid=true",
		"deferred_tool_requests:approvals=[a]:calls=[]",
		"deferred_tool_results:approvals=[a]:calls=[]",
		"final:paused")
	if runs.Load() != 2 {
		t.Errorf("tool ran %d times, want 2 (before and after the approval)", runs.Load())
	}
	wantRequests(t, m, 1)
}

// A handler's answer under the wrong category resolves nothing: an approval
// answered with a result under Calls stays pending and the tool does not
// run (SPEC §3, fail closed).
func TestHandlerResultForApprovalUnderCallsResolvesNothing(t *testing.T) {
	t.Parallel()
	var runs atomic.Int32
	gated := countedGated(&runs)
	h := handler(func(*deferred.Requests) *deferred.Results {
		return &deferred.Results{Calls: map[string]any{"a": "forged result"}}
	})
	m := turns(calls(call("gated", "a", `{"x":1}`)))
	res, err := newAgentCfg(t, agent.Config{Model: m, AllowDeferred: true, Capabilities: []agent.Capability{h}}, gated).Run(t.Context(), "go", nil)
	if err != nil {
		t.Fatal(err)
	}
	if idsOf(res.Deferred.Approvals) != "[a]" || runs.Load() != 0 {
		t.Errorf("remaining %+v, tool ran %d times", res.Deferred, runs.Load())
	}
	if last := res.Messages[len(res.Messages)-1]; last.Role != message.RoleResponse {
		t.Errorf("a result was recorded for the pending call: %+v", last)
	}
	wantRequests(t, m, 1)
}

// A handler's approval value that is not true, false, ToolApproved or
// ToolDenied ends the run before any answer is announced or applied (SPEC
// §3, fail closed where upstream executes the tool).
func TestHandlerInvalidApprovalRefused(t *testing.T) {
	t.Parallel()
	var runs atomic.Int32
	gated := countedGated(&runs)
	h := handler(func(*deferred.Requests) *deferred.Results {
		return &deferred.Results{Approvals: approvals("a", 1)}
	})
	m := turns(calls(call("gated", "a", `{"x":1}`)))
	var l eventLog
	_, err := newAgentCfg(t, agent.Config{Model: m, Capabilities: []agent.Capability{h}}, gated).Run(t.Context(), "go", l.opts(nil))
	var ue *agent.UserError
	if !errors.As(err, &ue) || !errors.Is(err, deferred.ErrInvalidApproval) || !strings.HasPrefix(err.Error(), `deferred handler: approval for "a": `) {
		t.Fatalf("err = %v", err)
	}
	if strings.Contains(l.String(), "deferred_tool_results") || runs.Load() != 0 {
		t.Errorf("the invalid answer was announced or applied (tool ran %d times):\n%s", runs.Load(), l.String())
	}
	wantRequests(t, m, 1)
}

// countedGated returns the tool gated, which needs approval, answers 1 and
// counts its runs in runs.
func countedGated(runs *atomic.Int32) *tool.Tool {
	return tool.Func("gated", "", func(context.Context, *tool.RunContext, xArgs) (int, error) {
		runs.Add(1)
		return 1, nil
	}, tool.NeedsApproval())
}
