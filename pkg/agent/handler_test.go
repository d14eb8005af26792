package agent_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
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
		m[kv[i].(string)] = kv[i+1]
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
		{name: "approve", calls: []message.ToolCall{call("gated", "a", `{"x":1}`)}, handlers: []agent.Capability{handler(func(r *deferred.Requests) *deferred.Results {
			return &deferred.Results{Approvals: approvals("a", true)}
		})}, wantParts: "tool-return:42", wantCalls: 2},
		// Scenario: test_deferred_tool_handler_deny
		{name: "deny", calls: []message.ToolCall{call("gated", "a", `{"x":1}`)}, handlers: []agent.Capability{handler(func(r *deferred.Requests) *deferred.Results {
			return &deferred.Results{Approvals: approvals("a", deferred.ToolDenied{Message: "Not allowed."})}
		})}, wantParts: "tool-return:Not allowed.", wantCalls: 2},
		// Scenario: test_deferred_tool_handler_batch_deny_via_bool_and_default
		{name: "deny bool and default", calls: []message.ToolCall{call("gated", "a", `{"x":1}`), call("gated", "b", `{"x":1}`)}, handlers: []agent.Capability{handler(func(r *deferred.Requests) *deferred.Results {
			return &deferred.Results{Approvals: approvals("a", false, "b", deferred.ToolDenied{})}
		})}, wantParts: "tool-return:The tool call was denied.|tool-return:The tool call was denied.", wantCalls: 2},
		// Scenario: test_deferred_tool_handler_none_fallback
		{name: "none falls back to pause", calls: []message.ToolCall{call("gated", "a", `{"x":1}`)}, allow: true, handlers: []agent.Capability{handler(func(*deferred.Requests) *deferred.Results { return nil })}, wantLeft: "a|", wantCalls: 1},
		// Scenario: test_deferred_tool_handler_partial_resolution
		{name: "partial", calls: []message.ToolCall{call("gated", "a", `{"x":1}`), call("gated", "b", `{"x":2}`)}, allow: true, handlers: []agent.Capability{handler(func(r *deferred.Requests) *deferred.Results {
			return &deferred.Results{Approvals: approvals("a", true)}
		})}, wantParts: "tool-return:42", wantLeft: "b|", wantCalls: 1},
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
		}, wantParts: "tool-return:42|tool-return:84", wantCalls: 2},
		// Scenario: test_deferred_tool_handler_unresolved_no_output_type_error
		{name: "empty results without pause allowed", calls: []message.ToolCall{call("gated", "a", `{"x":1}`)}, handlers: []agent.Capability{handler(func(*deferred.Requests) *deferred.Results { return &deferred.Results{} })}, wantErr: "A deferred tool call was present"},
		// Scenario: test_deferred_tool_handler_external_call
		{name: "external tool return with metadata", calls: []message.ToolCall{call("ext", "e", `{}`)}, handlers: []agent.Capability{handler(func(r *deferred.Requests) *deferred.Results {
			return &deferred.Results{Calls: map[string]any{"e": tool.Return{Value: "done", Metadata: map[string]any{"k": "v"}}}}
		})}, wantParts: "tool-return:done", wantCalls: 2},
		// Scenario: test_deferred_tool_handler_external_call_plain_value
		{name: "external plain value", calls: []message.ToolCall{call("ext", "e", `{}`)}, handlers: []agent.Capability{handler(func(r *deferred.Requests) *deferred.Results {
			return &deferred.Results{Calls: map[string]any{"e": 7}}
		})}, wantParts: "tool-return:7", wantCalls: 2},
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
		})}, wantParts: "tool-return:126", wantCalls: 2},
		// Scenario: test_deferred_tool_handler_build_results_helper
		{name: "build results approve all", calls: []message.ToolCall{call("gated", "a", `{"x":1}`), call("gated", "b", `{"x":1}`)}, handlers: []agent.Capability{handler(func(r *deferred.Requests) *deferred.Results {
			res, err := r.BuildResults(approvals("b", false), nil, nil, true)
			if err != nil {
				panic(err)
			}
			return res
		})}, wantParts: "tool-return:42|tool-return:The tool call was denied.", wantCalls: 2},
		// Scenario: test_deferred_tool_handler_no_output_type_needed (no AllowDeferred, all resolved)
		{name: "invalid approval from handler", calls: []message.ToolCall{call("gated", "a", `{"x":1}`)}, handlers: []agent.Capability{handler(func(r *deferred.Requests) *deferred.Results {
			return &deferred.Results{Approvals: approvals("a", 1)}
		})}, wantErr: "invalid approval value"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m := turns(calls(tc.calls...), text("final"))
			a := newAgentCfg(t, agent.Config{Model: m, AllowDeferred: tc.allow, Capabilities: tc.handlers, Toolsets: []tool.Toolset{ext(t)}}, times42("gated", tool.NeedsApproval()))
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
			if n := len(m.requests()); n != tc.wantCalls {
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
					got = append(got, "tool-return:"+x.ModelText())
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
