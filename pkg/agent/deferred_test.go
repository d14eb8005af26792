package agent_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/offload-dev/offload/pkg/agent"
	"github.com/offload-dev/offload/pkg/deferred"
	"github.com/offload-dev/offload/pkg/llm"
	"github.com/offload-dev/offload/pkg/message"
	"github.com/offload-dev/offload/pkg/tool"
)

func allowDeferred(t *testing.T, m llm.Model, tools ...*tool.Tool) *agent.Agent {
	t.Helper()
	return newAgentCfg(t, agent.Config{Model: m, AllowDeferred: true}, tools...)
}

func times42(name string, opts ...tool.Option) *tool.Tool {
	return tool.Func(name, "", func(_ context.Context, _ *tool.RunContext, a xArgs) (int, error) { return a.X * 42, nil }, opts...)
}

// Scenario: test_tool_raises_call_deferred
func TestToolRaisesCallDeferred(t *testing.T) {
	t.Parallel()
	// A deferral uses no retry: even a tool without retries defers.
	my := tool.Func("my_tool", "", func(context.Context, *tool.RunContext, xArgs) (int, error) {
		return 0, &tool.CallDeferred{}
	}, tool.Retries(0))
	m := turns(calls(call("my_tool", "c1", `{"x":0}`)))
	res, err := allowDeferred(t, m, my).Run(t.Context(), "go", nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Deferred.Calls) != 1 || res.Deferred.Calls[0].ToolCallID != "c1" || len(res.Deferred.Approvals) != 0 {
		t.Fatalf("deferred = %+v", res.Deferred)
	}
	if len(res.Deferred.Metadata) != 0 {
		t.Errorf("metadata without deferral metadata: %v", res.Deferred.Metadata)
	}
	if id := res.Deferred.TaskIDs["c1"]; len(id) != 26 {
		t.Errorf("task id %q is not a ULID", id)
	}
	wantRequests(t, m, 1)
}

// Scenario: test_tool_raises_approval_required
func TestToolRaisesApprovalRequiredThenOverride(t *testing.T) {
	t.Parallel()
	my := tool.Func("my_tool", "", func(_ context.Context, rc *tool.RunContext, a xArgs) (int, error) {
		if !rc.ToolCallApproved {
			return 0, &tool.ApprovalRequired{}
		}
		return a.X * 42, nil
	}, tool.Retries(0)) // a deferral uses no retry
	m := turns(calls(call("my_tool", "c1", `{"x":1}`)), text("Done!"))
	a := allowDeferred(t, m, my)
	res, err := a.Run(t.Context(), "go", nil)
	if err != nil || len(res.Deferred.Approvals) != 1 {
		t.Fatalf("first run: %v %+v", err, res.Deferred)
	}
	res2, err := a.Run(t.Context(), "", &agent.RunOptions{History: res.Messages, DeferredResults: &deferred.Results{
		Approvals: map[string]any{"c1": deferred.ToolApproved{OverrideArgs: json.RawMessage(`{"x":2}`)}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if res2.Output != "Done!" || len(res2.Messages) != 4 {
		t.Fatalf("output %q, %d messages", res2.Output, len(res2.Messages))
	}
	if got := returnContent(t, res2.Messages[2].Parts[0]); got != "84" {
		t.Errorf("return = %s, want 84", got)
	}
	if res2.RunID == res.RunID || res2.ConversationID != res.ConversationID {
		t.Errorf("ids: %s/%s %s/%s", res.RunID, res2.RunID, res.ConversationID, res2.ConversationID)
	}
	wantRequests(t, m, 2)
}

func TestDeferralMetadata(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		err  error
		want map[string]map[string]any
	}{
		// Scenario: test_call_deferred_with_metadata
		{"call_with", &tool.CallDeferred{Metadata: map[string]any{"task": "x"}}, map[string]map[string]any{"c1": {"task": "x"}}},
		// Scenario: test_approval_required_with_metadata
		{"approval_with", &tool.ApprovalRequired{Metadata: map[string]any{"reason": "big"}}, map[string]map[string]any{"c1": {"reason": "big"}}},
		// Scenario: test_call_deferred_without_metadata
		{"call_without", &tool.CallDeferred{}, map[string]map[string]any{}},
		// Scenario: test_approval_required_without_metadata
		{"approval_without", &tool.ApprovalRequired{}, map[string]map[string]any{}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tl := tool.Func("t", "", func(context.Context, *tool.RunContext, struct{}) (int, error) { return 0, tc.err })
			res, err := allowDeferred(t, turns(calls(call("t", "c1", "{}"))), tl).Run(t.Context(), "go", nil)
			if err != nil {
				t.Fatal(err)
			}
			if got, want := mustJSON(t, res.Deferred.Metadata), mustJSON(t, tc.want); got != want {
				t.Errorf("metadata %s, want %s", got, want)
			}
		})
	}
}

// Scenario: test_mixed_deferred_tools_with_metadata
func TestMixedDeferredWithMetadata(t *testing.T) {
	t.Parallel()
	ext := func(name string) *tool.Tool {
		return tool.Func(name, "", func(_ context.Context, _ *tool.RunContext, a xArgs) (int, error) {
			return 0, &tool.CallDeferred{Metadata: map[string]any{"id": name}}
		})
	}
	b := tool.Func("b", "", func(_ context.Context, rc *tool.RunContext, a xArgs) (int, error) {
		if !rc.ToolCallApproved {
			return 0, &tool.ApprovalRequired{Metadata: map[string]any{"why": "b"}}
		}
		return a.X * 2, nil
	})
	m := turns(calls(call("a", "a", `{"x":1}`), call("b", "b", `{"x":10}`), call("c", "c", `{"x":3}`)), text("Done!"))
	ag := allowDeferred(t, m, ext("a"), b, ext("c"))
	res, err := ag.Run(t.Context(), "go", nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := mustJSON(t, res.Deferred.Metadata); got != `{"a":{"id":"a"},"b":{"why":"b"},"c":{"id":"c"}}` {
		t.Errorf("metadata %s", got)
	}
	res2, err := ag.Run(t.Context(), "", &agent.RunOptions{History: res.Messages, DeferredResults: &deferred.Results{
		Calls:     map[string]any{"a": 10, "c": 30},
		Approvals: map[string]any{"b": deferred.ToolApproved{}},
	}})
	if err != nil || res2.Output != "Done!" {
		t.Fatalf("%v %q", err, res2.Output)
	}
	var got []string
	for _, p := range lastRequestParts(t, m, 1) {
		got = append(got, returnContent(t, p))
	}
	if strings.Join(got, ",") != "10,20,30" {
		t.Errorf("returns in emission order = %v", got)
	}
	if res2.Usage.ToolCalls != 1 {
		t.Errorf("tool_calls = %d, want 1 (only the approved execution)", res2.Usage.ToolCalls)
	}
	wantRequests(t, m, 2)
}

// Scenario: test_parallel_tool_return_with_deferred
func TestParallelToolReturnWithDeferred(t *testing.T) {
	t.Parallel()
	getPrice := tool.Func("get_price", "", func(_ context.Context, _ *tool.RunContext, a struct {
		Fruit string `json:"fruit"`
	}) (any, error) {
		switch a.Fruit {
		case "apple", "pear":
			return nil, tool.Retry("Unknown fruit: " + a.Fruit)
		}
		return tool.Return{Value: 10, Content: []message.Content{message.TextContent("The price of " + a.Fruit + " is 10.")}, Metadata: map[string]any{"fruit": a.Fruit}}, nil
	})
	buys, _ := tool.External(tool.Def{Name: "buy", Parameters: json.RawMessage(`{"type":"object","properties":{"fruit":{"type":"string"}},"required":["fruit"]}`)})
	m := turns(calls(
		call("get_price", "get_price_apple", `{"fruit":"apple"}`),
		call("get_price", "get_price_banana", `{"fruit":"banana"}`),
		call("get_price", "get_price_pear", `{"fruit":"pear"}`),
		call("get_price", "get_price_grape", `{"fruit":"grape"}`),
		call("buy", "buy_apple", `{"fruit":"apple"}`),
		call("buy", "buy_banana", `{"fruit":"banana"}`),
		call("buy", "buy_pear", `{"fruit":"pear"}`),
	), text("Done!"))
	a := newAgentCfg(t, agent.Config{Model: m, AllowDeferred: true, Toolsets: []tool.Toolset{buys}}, getPrice)
	res, err := a.Run(t.Context(), "buy", nil)
	if err != nil {
		t.Fatal(err)
	}
	var first []string
	for _, p := range res.Messages[len(res.Messages)-1].Parts {
		first = append(first, p.PartKind())
	}
	if got := strings.Join(first, ","); got != "retry-prompt,tool-return,retry-prompt,tool-return,user-prompt,user-prompt" {
		t.Errorf("first-run trailing request = %s", got)
	}
	var ids []string
	for _, c := range res.Deferred.Calls {
		ids = append(ids, c.ToolCallID)
	}
	if strings.Join(ids, ",") != "buy_apple,buy_banana,buy_pear" {
		t.Errorf("deferred calls = %v", ids)
	}
	res2, err := a.Run(t.Context(), "", &agent.RunOptions{History: res.Messages, DeferredResults: &deferred.Results{Calls: map[string]any{
		"buy_apple":  tool.Retry("Apples are not available"),
		"buy_banana": tool.Return{Value: true, Content: []message.Content{message.TextContent("I bought a banana")}, Metadata: map[string]any{"price": 100}},
		"buy_pear":   message.RetryPrompt{Content: "Pears are only available in the US"},
	}}})
	if err != nil {
		t.Fatal(err)
	}
	newReq := res2.NewMessages()[0]
	var kinds []string
	for _, p := range newReq.Parts {
		kinds = append(kinds, p.PartKind())
	}
	if strings.Join(kinds, ",") != "retry-prompt,tool-return,retry-prompt,user-prompt" {
		t.Errorf("resume request = %v", kinds)
	}
	if rp := newReq.Parts[2].(message.RetryPrompt); rp.ToolName != "buy" || rp.ToolCallID != "buy_pear" {
		t.Errorf("retry prompt names not stamped: %+v", rp)
	}
	if tr := newReq.Parts[1].(message.ToolReturn); mustJSON(t, tr.Metadata) != `{"price":100}` {
		t.Errorf("metadata = %v", tr.Metadata)
	}
	// On the wire both requests merge, tool results first.
	wire := m.Requests()[1].Messages
	var wireKinds []string
	for _, p := range wire[len(wire)-1].Parts {
		wireKinds = append(wireKinds, p.PartKind())
	}
	if got := strings.Join(wireKinds, ","); got != "retry-prompt,tool-return,retry-prompt,tool-return,retry-prompt,tool-return,retry-prompt,user-prompt,user-prompt,user-prompt" {
		t.Errorf("wire request = %s", got)
	}
	if res2.Output != "Done!" {
		t.Errorf("output %q", res2.Output)
	}
	wantRequests(t, m, 2)
}

// Scenario: test_deferred_tool_with_output_type (deferred tools offered but not called)
func TestDeferredToolsNotCalled(t *testing.T) {
	t.Parallel()
	res, err := newAgent(t, turns(text("plain")), times42("gated", tool.NeedsApproval())).Run(t.Context(), "go", nil)
	if err != nil || res.Output != "plain" || res.Paused() {
		t.Fatalf("%v %+v", err, res)
	}
}

// Scenario: test_deferred_tool_without_output_type
func TestDeferredNotAllowed(t *testing.T) {
	t.Parallel()
	var events []string
	_, err := newAgent(t, turns(calls(call("gated", "c1", `{"x":1}`))), times42("gated", tool.NeedsApproval())).Run(t.Context(), "go", &agent.RunOptions{OnEvent: func(e agent.Event) { events = append(events, string(e.Type)) }})
	if !errors.Is(err, agent.ErrDeferredNotAllowed) || !strings.Contains(err.Error(), "HandleDeferredToolCalls") {
		t.Fatalf("err = %v", err)
	}
	if !strings.Contains(strings.Join(events, ","), "deferred_tool_requests") {
		t.Errorf("deferred_tool_requests not emitted before the error: %v", events)
	}
}

// A run refused for its unresolved deferred calls keeps the results of the
// calls that ran in its history: continuing it (now allowed to pause) does
// not run them again.
func TestDeferredNotAllowedKeepsWhatRan(t *testing.T) {
	t.Parallel()
	var runs atomic.Int32
	fn := tool.Func("fn", "", func(context.Context, *tool.RunContext, struct{}) (string, error) {
		runs.Add(1)
		return "side effect", nil
	})
	m := turns(calls(call("fn", "c1", `{}`), call("gated", "c2", `{"x":1}`)))
	a := newAgent(t, m, fn, times42("gated", tool.NeedsApproval()))
	res, err := a.Run(t.Context(), "go", nil)
	if !errors.Is(err, agent.ErrDeferredNotAllowed) {
		t.Fatalf("err = %v", err)
	}
	res, err = a.Run(t.Context(), "", &agent.RunOptions{History: res.Messages, AllowDeferred: true})
	if err != nil || !res.Paused() || len(res.Deferred.Approvals) != 1 {
		t.Fatalf("%v %+v", err, res)
	}
	if n := runs.Load(); n != 1 {
		t.Errorf("the tool ran %d times: the refused run's history lost its result", n)
	}
}

// Scenario: test_unapproved_tool_invalid_args_retry
// Scenario: test_unapproved_tool_invalid_args_max_retries_exceeded
func TestUnapprovedToolInvalidArgs(t *testing.T) {
	t.Parallel()
	m := turns(calls(call("gated", "c1", `{"x":"bad"}`)), calls(call("gated", "c2", `{"x":1}`)))
	res, err := allowDeferred(t, m, times42("gated", tool.NeedsApproval())).Run(t.Context(), "go", nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := lastRequestParts(t, m, 1)[0].(message.RetryPrompt); !ok || res.Deferred.Approvals[0].ToolCallID != "c2" {
		t.Fatalf("want retry then deferral: %+v", res.Deferred)
	}
	_, err = allowDeferred(t, turns(calls(call("gated", "c1", `{"x":"bad"}`))), times42("gated", tool.NeedsApproval(), tool.Retries(0))).Run(t.Context(), "go", nil)
	if err == nil || !strings.HasPrefix(err.Error(), "Tool 'gated' exceeded max retries count of 0.") {
		t.Fatalf("err = %v", err)
	}
}

// Scenario: test_approval_required_toolset
func TestApprovalRequiredToolset(t *testing.T) {
	t.Parallel()
	base := tool.MustSet(times42("foo1"), times42("foo2"), times42("bar"))
	ts := tool.RequireApproval(base, func(_ context.Context, _ *tool.RunContext, t *tool.Tool, _ json.RawMessage) bool {
		return strings.HasPrefix(t.Name, "foo")
	})
	m := turns(calls(call("foo1", "f1", `{"x":1}`), call("foo2", "f2", `{"x":2}`), call("bar", "b", `{"x":3}`)), text("done"))
	a := newAgentCfg(t, agent.Config{Model: m, Toolsets: []tool.Toolset{ts}, AllowDeferred: true})
	res, err := a.Run(t.Context(), "go", nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Deferred.Approvals) != 2 || returnContent(t, res.Messages[len(res.Messages)-1].Parts[0]) != "126" {
		t.Fatalf("deferred %+v", res.Deferred)
	}
	res2, err := a.Run(t.Context(), "", &agent.RunOptions{History: res.Messages, DeferredResults: &deferred.Results{Approvals: map[string]any{"f1": true, "f2": false}}})
	if err != nil {
		t.Fatal(err)
	}
	p := res2.NewMessages()[0].Parts
	if len(p) != 2 || returnContent(t, p[0]) != "42" || p[0].(message.ToolReturn).Outcome != message.OutcomeSuccess ||
		returnContent(t, p[1]) != "The tool call was denied." || p[1].(message.ToolReturn).Outcome != message.OutcomeDenied {
		t.Errorf("parts = %+v", p)
	}
	if res2.Output != "done" {
		t.Errorf("output %q", res2.Output)
	}
	wantRequests(t, m, 2)
}

// Scenario: test_deferred_tool_call_result_tool_failed
// Scenario: test_deferred_tool_call_approved_fails
func TestExternalResults(t *testing.T) {
	t.Parallel()
	ext, _ := tool.External(tool.Def{Name: "ext"})
	mk := func() (*agent.Agent, *agent.Result) {
		a := newAgentCfg(t, agent.Config{Model: turns(calls(call("ext", "e1", `{}`)), text("ok")), Toolsets: []tool.Toolset{ext}, AllowDeferred: true})
		res, err := a.Run(t.Context(), "go", nil)
		if err != nil || len(res.Deferred.Calls) != 1 {
			t.Fatalf("%v %+v", err, res)
		}
		return a, res
	}
	a, res := mk()
	res2, err := a.Run(t.Context(), "", &agent.RunOptions{History: res.Messages, DeferredResults: &deferred.Results{Calls: map[string]any{"e1": tool.Fail("no")}}})
	if err != nil {
		t.Fatal(err)
	}
	if res2.Output != "ok" || len(res2.NewMessages()) != 2 {
		t.Errorf("output %q after %d new messages, want one more model request", res2.Output, len(res2.NewMessages()))
	}
	if tr := res2.NewMessages()[0].Parts[0].(message.ToolReturn); tr.Outcome != message.OutcomeFailed || tr.ModelText() != `{"error":"no"}` {
		t.Errorf("failed = %+v", tr)
	}
	a, res = mk()
	_, err = a.Run(t.Context(), "", &agent.RunOptions{History: res.Messages, DeferredResults: &deferred.Results{Approvals: map[string]any{"e1": true}}})
	if !errors.Is(err, tool.ErrExternal) || err.Error() != "External tools cannot be called" {
		t.Fatalf("approving external: %v", err)
	}
}

// Scenario: test_hitl_tool_approval
func TestHITLToolApproval(t *testing.T) {
	t.Parallel()
	var created atomic.Int32
	create := tool.Func("create_file", "", func(context.Context, *tool.RunContext, struct {
		Path string `json:"path"`
	}) (string, error) {
		created.Add(1)
		return "created", nil
	})
	del := tool.Func("delete_file", "", func(_ context.Context, _ *tool.RunContext, a struct {
		Path string `json:"path"`
	}) (string, error) {
		return "deleted " + a.Path, nil
	}, tool.NeedsApproval())
	m := turns(calls(call("create_file", "c", `{"path":"new"}`), call("delete_file", "ok", `{"path":"a"}`), call("delete_file", "never", `{"path":"b"}`)), text("done"))
	a := allowDeferred(t, m, create, del)
	res, err := a.Run(t.Context(), "go", nil)
	if err != nil || len(res.Deferred.Approvals) != 2 || created.Load() != 1 {
		t.Fatalf("%v %+v", err, res.Deferred)
	}
	res2, err := a.Run(t.Context(), "", &agent.RunOptions{History: res.Messages, DeferredResults: &deferred.Results{Approvals: map[string]any{
		"ok": true, "never": deferred.ToolDenied{Message: "File cannot be deleted"},
	}}})
	if err != nil {
		t.Fatal(err)
	}
	p := res2.NewMessages()[0].Parts
	if len(p) != 2 || returnContent(t, p[0]) != "deleted a" || p[0].(message.ToolReturn).Outcome != message.OutcomeSuccess ||
		returnContent(t, p[1]) != "File cannot be deleted" || p[1].(message.ToolReturn).Outcome != message.OutcomeDenied {
		t.Errorf("parts = %+v", p)
	}
	if res2.Output != "done" || created.Load() != 1 {
		t.Errorf("output %q, create_file ran %d times", res2.Output, created.Load())
	}
	wantRequests(t, m, 2)
}

// Scenario: test_run_with_deferred_tool_results_errors
func TestResumeErrors(t *testing.T) {
	t.Parallel()
	a := allowDeferred(t, turns(text("x")), times42("gated", tool.NeedsApproval()), times42("plain"))
	resp := func(cs ...message.ToolCall) message.Message {
		m := message.NewResponse()
		for _, c := range cs {
			m.Parts = append(m.Parts, c)
		}
		return m
	}
	ret := func(id string) message.Message {
		return message.NewRequest(message.ToolReturn{ToolName: "plain", ToolCallID: id, Content: json.RawMessage("1")})
	}
	retry := func(id string) message.Message {
		return message.NewRequest(message.RetryPrompt{ToolName: "plain", ToolCallID: id, Content: "no"})
	}
	user := message.NewRequest(message.UserText("hi"))
	approve := func(ids ...string) *deferred.Results {
		r := &deferred.Results{Approvals: map[string]any{}}
		for _, id := range ids {
			r.Approvals[id] = true
		}
		return r
	}
	cases := []struct {
		name    string
		history message.History
		results *deferred.Results
		prompt  string
		want    string
	}{
		{"empty history", nil, approve("x"), "", "Tool call results were provided, but the message history is empty."},
		{"no response", message.History{user}, approve("x"), "", "Tool call results were provided, but the message history does not contain a `ModelResponse`."},
		{"no calls", message.History{user, resp()}, approve("x"), "", "Tool call results were provided, but the message history does not contain any unprocessed tool calls."},
		{"already executed return", message.History{user, resp(call("plain", "p", "{}"), call("gated", "g", `{"x":1}`)), ret("p")}, approve("p", "g"), "", "Tool call 'p' was already executed and its result cannot be overridden."},
		{"already executed retry", message.History{user, resp(call("plain", "p", "{}"), call("gated", "g", `{"x":1}`)), retry("p")}, approve("p", "g"), "", "Tool call 'p' was already executed and its result cannot be overridden."},
		{"missing result", message.History{user, resp(call("gated", "g1", `{"x":1}`), call("gated", "g2", `{"x":1}`))}, approve("g1"), "", "Tool call results need to be provided for all deferred tool calls. Expected: {'g1', 'g2'}, got: {'g1'}"},
		{"extra result", message.History{user, resp(call("gated", "g1", `{"x":1}`))}, approve("g1", "zz"), "", "Tool call results need to be provided for all deferred tool calls. Expected: {'g1'}, got: {'g1', 'zz'}"},
		{"empty results", message.History{user, resp(call("gated", "g1", `{"x":1}`))}, &deferred.Results{}, "", "Tool call results need to be provided for all deferred tool calls. Expected: {'g1'}, got: {}"},
		// Scenario: test_deferred_tool_results_reject_duplicate_tool_call_ids_in_history
		{"duplicate ids", message.History{user, resp(call("gated", "g", `{"x":1}`), call("gated", "g", `{"x":2}`))}, approve("g"), "", "Tool call results cannot be matched unambiguously because the message history contains duplicate tool_call_id values: ['g']"},
		{"new prompt on pending calls", message.History{user, resp(call("gated", "g", `{"x":1}`))}, nil, "more", "Cannot provide a new user prompt when the message history contains unprocessed tool calls."},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := a.Run(t.Context(), tc.prompt, &agent.RunOptions{History: tc.history, DeferredResults: tc.results})
			var ue *agent.UserError
			if !errors.As(err, &ue) || err.Error() != tc.want {
				t.Fatalf("err = %v\nwant %s", err, tc.want)
			}
		})
	}
}

// Scenario: test_deferred_tool_requests_reject_duplicate_tool_call_ids
func TestDuplicateDeferredIDs(t *testing.T) {
	t.Parallel()
	_, err := allowDeferred(t, turns(calls(call("gated", "g", `{"x":1}`), call("gated", "g", `{"x":2}`))), times42("gated", tool.NeedsApproval())).Run(t.Context(), "go", nil)
	var umb *agent.UnexpectedModelBehavior
	if !errors.As(err, &umb) || err.Error() != "Deferred tool calls must have unique tool_call_id values; duplicate ids: ['g']" {
		t.Fatalf("err = %v", err)
	}
}

// A deferred call sharing its ID with a call that ran can never be
// answered (its result would override the other's): the step fails as for
// two deferred calls sharing an ID, rather than pausing on a call that no
// decision can resolve.
func TestDeferredIDSharedWithExecutedCall(t *testing.T) {
	t.Parallel()
	m := turns(calls(call("fn", "g", `{"x":1}`), call("gated", "g", `{"x":2}`)))
	res, err := allowDeferred(t, m, times42("fn"), times42("gated", tool.NeedsApproval())).Run(t.Context(), "go", nil)
	var umb *agent.UnexpectedModelBehavior
	if !errors.As(err, &umb) || err.Error() != "Deferred tool calls must have unique tool_call_id values; duplicate ids: ['g']" {
		t.Fatalf("err = %v, paused %v", err, res.Paused())
	}
}

// A call approved with override arguments that asks for approval again is
// listed with the arguments a plain approval would run it with: what the
// next approver sees is what runs.
func TestReDeferredOverrideShowsWhatRuns(t *testing.T) {
	t.Parallel()
	var ran []int
	var mu sync.Mutex
	pay := tool.Func("pay", "", func(_ context.Context, rc *tool.RunContext, a xArgs) (string, error) {
		if !rc.ToolCallApproved {
			return "", &tool.ApprovalRequired{}
		}
		if a.X > 100 && rc.ToolCallMetadata["manager"] != true {
			return "", &tool.ApprovalRequired{Metadata: map[string]any{"reason": "needs a manager"}}
		}
		mu.Lock()
		ran = append(ran, a.X)
		mu.Unlock()
		return "paid", nil
	})
	m := turns(calls(call("pay", "c1", `{"x":1}`)), text("done"))
	a := allowDeferred(t, m, pay)
	res, err := a.Run(t.Context(), "go", nil)
	if err != nil || res.Deferred.Len() != 1 {
		t.Fatalf("%v %+v", err, res)
	}
	res, err = a.Run(t.Context(), "", &agent.RunOptions{History: res.Messages, DeferredResults: &deferred.Results{
		Approvals: map[string]any{"c1": deferred.ToolApproved{OverrideArgs: json.RawMessage(`{"x":500}`)}},
	}})
	if err != nil || res.Deferred.Len() != 1 {
		t.Fatalf("%v %+v", err, res)
	}
	shown := res.Deferred.Approvals[0].ArgsJSON()
	res, err = a.Run(t.Context(), "", &agent.RunOptions{History: res.Messages, DeferredResults: &deferred.Results{
		Approvals: map[string]any{"c1": true},
		Metadata:  map[string]map[string]any{"c1": {"manager": true}},
	}})
	if err != nil || res.Output != "done" {
		t.Fatalf("%v %+v", err, res)
	}
	var shownArgs xArgs
	if err := json.Unmarshal(shown, &shownArgs); err != nil {
		t.Fatal(err)
	}
	if len(ran) != 1 || ran[0] != shownArgs.X {
		t.Errorf("the pending call showed %s, the approval ran it with x=%v", shown, ran)
	}
}

// Scenario: test_user_prompt_with_deferred_tool_results
// Scenario: test_agent_run_id_fresh_on_deferred_resume
func TestPromptAppendedAfterResults(t *testing.T) {
	t.Parallel()
	m := turns(calls(call("gated", "g", `{"x":1}`)), text("done"))
	a := allowDeferred(t, m, times42("gated", tool.NeedsApproval()))
	res, err := a.Run(t.Context(), "go", nil)
	if err != nil {
		t.Fatal(err)
	}
	if last := res.Messages[len(res.Messages)-1]; last.Role != message.RoleResponse {
		t.Errorf("history should end on the response when nothing executed")
	}
	res2, err := a.Run(t.Context(), "and then?", &agent.RunOptions{History: res.Messages, DeferredResults: &deferred.Results{Approvals: map[string]any{"g": true}}})
	if err != nil {
		t.Fatal(err)
	}
	p := res2.NewMessages()[0].Parts
	if len(p) != 2 || p[0].PartKind() != "tool-return" || p[1].(message.UserPrompt).Content[0].Text != "and then?" {
		t.Errorf("request parts = %+v", p)
	}
	for _, msg := range res2.NewMessages() {
		if msg.RunID != res2.RunID || msg.RunID == res.RunID {
			t.Errorf("new message run id %s", msg.RunID)
		}
	}
	for _, msg := range res2.Messages[:len(res.Messages)] {
		if msg.RunID != res.RunID {
			t.Errorf("old message restamped: %s", msg.RunID)
		}
	}
	if res2.Output != "done" {
		t.Errorf("output %q", res2.Output)
	}
	wantRequests(t, m, 2)
}

// Scenario: test_run_with_unapproved_tool_call_in_history
func TestUnapprovedCallInHistory(t *testing.T) {
	t.Parallel()
	m := turns(text("never"))
	a := allowDeferred(t, m, times42("gated", tool.NeedsApproval()))
	h := message.History{message.NewRequest(message.UserText("hi")), message.NewResponse(call("gated", "g", `{"x":1}`))}
	res, err := a.Run(t.Context(), "", &agent.RunOptions{History: h})
	if err != nil || len(res.Deferred.Approvals) != 1 || len(m.Requests()) != 0 || len(res.Messages) != 2 {
		t.Fatalf("%v %+v model calls %d", err, res, len(m.Requests()))
	}
}

// Scenario: test_args_validator_requests_approval
// Scenario: test_args_validator_not_double_called_for_approved_tools
func TestArgsValidatorRequestsApproval(t *testing.T) {
	t.Parallel()
	var seen []string
	var runs atomic.Int32
	sensitive := tool.Func("sensitive", "", func(_ context.Context, _ *tool.RunContext, a xArgs) (int, error) {
		runs.Add(1)
		return a.X, nil
	}, tool.Retries(0), tool.Validate(func(_ context.Context, rc *tool.RunContext, a xArgs) error {
		seen = append(seen, mustJSON(t, []any{rc.Retry, rc.ToolCallApproved}))
		if !rc.ToolCallApproved {
			return &tool.ApprovalRequired{Metadata: map[string]any{"reason": "sensitive"}}
		}
		return nil
	}))
	m := turns(calls(call("sensitive", "s", `{"x":5}`)), text("ok"))
	var valid []string
	a := allowDeferred(t, m, sensitive)
	res, err := a.Run(t.Context(), "go", &agent.RunOptions{OnEvent: func(e agent.Event) {
		if e.Type == agent.EventToolCall {
			valid = append(valid, mustJSON(t, e.ArgsValid))
		}
	}})
	if err != nil || mustJSON(t, res.Deferred.Metadata) != `{"s":{"reason":"sensitive"}}` || runs.Load() != 0 {
		t.Fatalf("%v %+v", err, res.Deferred)
	}
	if strings.Join(valid, ",") != "true" {
		t.Errorf("args_valid = %v", valid)
	}
	res2, err := a.Run(t.Context(), "", &agent.RunOptions{History: res.Messages, DeferredResults: &deferred.Results{Approvals: map[string]any{"s": true}}})
	if err != nil {
		t.Fatal(err)
	}
	if runs.Load() != 1 || strings.Join(seen, ";") != "[0,false];[0,true]" {
		t.Errorf("runs %d validator calls %v", runs.Load(), seen)
	}
	if res2.Output != "ok" || returnContent(t, res2.NewMessages()[0].Parts[0]) != "5" {
		t.Errorf("output %q, new messages %+v", res2.Output, res2.NewMessages())
	}
	wantRequests(t, m, 2)
}

// Scenario: test_args_validator_defers_call
func TestArgsValidatorDefersCall(t *testing.T) {
	t.Parallel()
	var runs atomic.Int32
	remote := tool.Func("remote", "", func(context.Context, *tool.RunContext, xArgs) (int, error) {
		runs.Add(1)
		return 0, nil
	}, tool.Retries(0), tool.Validate(func(context.Context, *tool.RunContext, xArgs) error { return &tool.CallDeferred{} }))
	m := turns(calls(call("remote", "r", `{"x":1}`)), text("ok"))
	a := allowDeferred(t, m, remote)
	res, err := a.Run(t.Context(), "go", nil)
	if err != nil || len(res.Deferred.Calls) != 1 {
		t.Fatal(err, res.Deferred)
	}
	res2, err := a.Run(t.Context(), "", &agent.RunOptions{History: res.Messages, DeferredResults: &deferred.Results{Calls: map[string]any{"r": map[string]any{"v": 1}}}})
	if err != nil || runs.Load() != 0 || returnContent(t, res2.NewMessages()[0].Parts[0]) != `{"v":1}` {
		t.Fatalf("%v runs=%d", err, runs.Load())
	}
	if res2.Output != "ok" {
		t.Errorf("output %q", res2.Output)
	}
	wantRequests(t, m, 2)
}

// Scenario: test_args_validator_deferral_metadata_not_merged_for_already_deferred_kinds
func TestValidatorMetadataNotMergedForDeferredKinds(t *testing.T) {
	t.Parallel()
	gated := times42("gated", tool.NeedsApproval(), tool.Validate(func(context.Context, *tool.RunContext, xArgs) error {
		return &tool.ApprovalRequired{Metadata: map[string]any{"from": "validator"}}
	}))
	res, err := allowDeferred(t, turns(calls(call("gated", "g", `{"x":1}`))), gated).Run(t.Context(), "go", nil)
	if err != nil || len(res.Deferred.Metadata) != 0 {
		t.Fatalf("%v %v", err, res.Deferred.Metadata)
	}
}

// Scenario: test_tool_approved_with_metadata
// Scenario: test_tool_approved_with_metadata_and_override_args
// Scenario: test_tool_approved_without_metadata
// Scenario: test_tool_call_metadata_not_available_for_unapproved_calls
func TestToolCallMetadata(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var got []string
	gated := tool.Func("gated", "", func(_ context.Context, rc *tool.RunContext, a xArgs) (int, error) {
		mu.Lock()
		defer mu.Unlock()
		got = append(got, mustJSON(t, []any{rc.ToolCallID, a.X, rc.ToolCallApproved, rc.ToolCallMetadata}))
		return a.X, nil
	}, tool.NeedsApproval())
	plain := tool.Func("plain", "", func(_ context.Context, rc *tool.RunContext, _ struct{}) (int, error) {
		mu.Lock()
		defer mu.Unlock()
		got = append(got, mustJSON(t, []any{rc.ToolCallID, "plain", rc.ToolCallApproved, rc.ToolCallMetadata}))
		return 0, nil
	})
	m := turns(calls(call("gated", "a", `{"x":1}`), call("gated", "b", `{"x":2}`), call("gated", "c", `{"x":3}`), call("plain", "p", `{}`)), text("ok"))
	a := allowDeferred(t, m, gated, plain)
	res, err := a.Run(t.Context(), "go", nil)
	if err != nil {
		t.Fatal(err)
	}
	res2, err := a.Run(t.Context(), "", &agent.RunOptions{History: res.Messages, DeferredResults: &deferred.Results{
		// a: metadata only; b: metadata and override args on one call; c: neither.
		Approvals: map[string]any{
			"a": true,
			"b": deferred.ToolApproved{OverrideArgs: json.RawMessage(`{"x":100}`)},
			"c": true,
		},
		Metadata: map[string]map[string]any{"a": {"user": "alice"}, "b": {"user": "bob", "reason": "override"}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(got[1:]) // approved calls run concurrently
	want := `["p","plain",false,null]|["a",1,true,{"user":"alice"}]|["b",100,true,{"reason":"override","user":"bob"}]|["c",3,true,null]`
	if strings.Join(got, "|") != want {
		t.Errorf("got  %s\nwant %s", strings.Join(got, "|"), want)
	}
	var returns []string
	for _, p := range res2.NewMessages()[0].Parts {
		returns = append(returns, returnContent(t, p))
	}
	if strings.Join(returns, ",") != "1,100,3" || res2.Output != "ok" {
		t.Errorf("returns %v, output %q", returns, res2.Output)
	}
	wantRequests(t, m, 2)
}

// Fail-closed cases of SPEC §3.
func TestResumeFailsClosed(t *testing.T) {
	t.Parallel()
	ext, _ := tool.External(tool.Def{Name: "ext"})
	setup := func(t *testing.T) (*agent.Agent, *agent.Result) {
		a := newAgentCfg(t, agent.Config{Model: turns(calls(call("gated", "g", `{"x":1}`), call("ext", "e", `{}`)), text("ok")), AllowDeferred: true, Toolsets: []tool.Toolset{ext}}, times42("gated", tool.NeedsApproval()))
		res, err := a.Run(t.Context(), "go", nil)
		if err != nil {
			t.Fatal(err)
		}
		return a, res
	}
	cases := []struct {
		name    string
		results *deferred.Results
		want    string
	}{
		{"invalid approval value", &deferred.Results{Approvals: map[string]any{"g": "yes"}, Calls: map[string]any{"e": 1}}, "Tool call 'g': deferred: invalid approval value: string (yes); use true, false, deferred.ToolApproved or deferred.ToolDenied"},
		{"nil approval value", &deferred.Results{Approvals: map[string]any{"g": nil}, Calls: map[string]any{"e": 1}}, "Tool call 'g': deferred: invalid approval value: <nil> (<nil>); use true, false, deferred.ToolApproved or deferred.ToolDenied"},
		{"approval answered as call", &deferred.Results{Calls: map[string]any{"g": 1, "e": 1}}, "awaits approval"},
		{"external answered as approval", &deferred.Results{Approvals: map[string]any{"g": true, "e": false}}, "is an external call"},
		{"external approved", &deferred.Results{Approvals: map[string]any{"g": true, "e": true}}, "External tools cannot be called"},
		{"both categories", &deferred.Results{Approvals: map[string]any{"g": true}, Calls: map[string]any{"g": 1, "e": 1}}, "both an approval and a result"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			a, res := setup(t)
			_, err := a.Run(t.Context(), "", &agent.RunOptions{History: res.Messages, DeferredResults: tc.results})
			var ue *agent.UserError
			if !errors.As(err, &ue) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
			if strings.HasPrefix(tc.want, "Tool call 'g': ") && (err.Error() != tc.want || !errors.Is(err, deferred.ErrInvalidApproval)) {
				t.Errorf("err = %q, want exactly %q wrapping ErrInvalidApproval", err, tc.want)
			}
		})
	}
}

// The task ID minted at deferral survives a re-deferral on resume.
func TestTaskIDStableAcrossResumes(t *testing.T) {
	t.Parallel()
	attempts := 0
	flaky := tool.Func("flaky", "", func(_ context.Context, rc *tool.RunContext, _ struct{}) (int, error) {
		attempts++
		return 0, &tool.ApprovalRequired{Metadata: map[string]any{"attempt": attempts}}
	})
	a := allowDeferred(t, turns(calls(call("flaky", "f", `{}`))), flaky)
	res, err := a.Run(t.Context(), "go", nil)
	if err != nil {
		t.Fatal(err)
	}
	res2, err := a.Run(t.Context(), "", &agent.RunOptions{History: res.Messages, DeferredResults: &deferred.Results{Approvals: map[string]any{"f": true}}})
	if err != nil || !res2.Paused() {
		t.Fatalf("%v %+v", err, res2)
	}
	if res.Deferred.TaskIDs["f"] != res2.Deferred.TaskIDs["f"] || mustJSON(t, res2.Deferred.Metadata) != `{"f":{"attempt":2}}` {
		t.Errorf("task ids %v %v metadata %v", res.Deferred.TaskIDs, res2.Deferred.TaskIDs, res2.Deferred.Metadata)
	}
}

// The category of a call deferred by raising is the one it raised, kept
// in the history: a resume answering it in the other category is refused
// and nothing runs (SPEC §3), although its tool's kind says nothing.
func TestResumeFailsClosedForRaisedDeferrals(t *testing.T) {
	t.Parallel()
	var runs atomic.Int32
	asks := tool.Func("asks", "", func(_ context.Context, rc *tool.RunContext, _ struct{}) (int, error) {
		runs.Add(1)
		if !rc.ToolCallApproved {
			return 0, &tool.ApprovalRequired{}
		}
		return 1, nil
	})
	defers := tool.Func("defers", "", func(context.Context, *tool.RunContext, struct{}) (int, error) {
		runs.Add(1)
		return 0, &tool.CallDeferred{}
	})
	cases := []struct {
		name    string
		results *deferred.Results
		want    string
	}{
		{"approval answered as call", &deferred.Results{Calls: map[string]any{"a": 1, "d": 1}}, "Tool call 'a' awaits approval: give a decision under `approvals`, not a result under `calls`."},
		{"external answered as denial", &deferred.Results{Approvals: map[string]any{"a": true, "d": false}}, "Tool call 'd' is an external call: give its result under `calls`, not an approval."},
		{"external approved", &deferred.Results{Approvals: map[string]any{"a": true, "d": true}}, "External tools cannot be called"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m := turns(calls(call("asks", "a", `{}`), call("defers", "d", `{}`)))
			a := allowDeferred(t, m, asks, defers)
			res, err := a.Run(t.Context(), "go", nil)
			if err != nil || idsOf(res.Deferred.Approvals) != "[a]" || idsOf(res.Deferred.Calls) != "[d]" {
				t.Fatalf("first run: %v %+v", err, res)
			}
			before := runs.Load()
			_, err = a.Run(t.Context(), "", &agent.RunOptions{History: res.Messages, DeferredResults: tc.results})
			var ue *agent.UserError
			if !errors.As(err, &ue) || err.Error() != tc.want {
				t.Fatalf("err = %v\nwant %s", err, tc.want)
			}
			if runs.Load() != before {
				t.Errorf("a tool ran on a refused resume")
			}
			wantRequests(t, m, 1)
		})
	}
}

// A call deferred with its answer to go to its next attempt (an MCP
// elicitation, SPEC §16): the answer supplied for it is not its result:
// the tool runs again, under the same task, with the answer in its
// ToolCallMetadata (a value accepts, a failure declines) beside the
// worker that holds the call, and what it returns then is the call's
// result.
func TestExternalAnswerToNextAttempt(t *testing.T) {
	t.Parallel()
	var runs []*tool.RunContext
	var mu sync.Mutex
	ask := tool.Func("ask", "", func(_ context.Context, rc *tool.RunContext, _ struct{}) (string, error) {
		mu.Lock()
		runs = append(runs, rc)
		mu.Unlock()
		ans, ok := rc.ToolCallMetadata[tool.AnswerMetaKey].(map[string]any)
		if !ok {
			return "", &tool.CallDeferred{Metadata: map[string]any{tool.AnswerToMetaKey: tool.AnswerToNextAttempt, tool.AnswerHolderMetaKey: "worker-7", "mcp.elicitation": map[string]any{"message": "Your name?"}}}
		}
		if ans["action"] != "accept" {
			return fmt.Sprintf("%v: %v", ans["action"], ans["message"]), nil
		}
		return fmt.Sprintf("hello %v", ans["content"].(map[string]any)["name"]), nil
	}, tool.Retries(0))
	for _, tc := range []struct {
		name   string
		answer any
		want   string
	}{
		{"accept", map[string]any{"name": "Ada"}, "hello Ada"},
		// As a stored answer's content decodes.
		{"accept_return", tool.Return{Value: json.RawMessage(`{"name":"Grace"}`)}, "hello Grace"},
		{"decline", tool.Fail("not telling"), "decline: not telling"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			runs = nil
			m := turns(calls(call("ask", "c1", `{}`)), text("ok"))
			a := allowDeferred(t, m, ask)
			res, err := a.Run(t.Context(), "go", nil)
			if err != nil || len(res.Deferred.Calls) != 1 || !tool.AnswersNextAttempt(res.Deferred.Metadata["c1"]) {
				t.Fatalf("first run: %v %+v", err, res.Deferred)
			}
			res2, err := a.Run(t.Context(), "", &agent.RunOptions{History: res.Messages, DeferredResults: &deferred.Results{Calls: map[string]any{"c1": tc.answer}}})
			if err != nil {
				t.Fatal(err)
			}
			if got := returnContent(t, res2.NewMessages()[0].Parts[0]); got != tc.want || res2.Output != "ok" {
				t.Errorf("result %s (output %q), want %s", got, res2.Output, tc.want)
			}
			if len(runs) != 2 || runs[1].TaskID != res.Deferred.TaskIDs["c1"] {
				t.Errorf("%d runs, the second under task %q, want 2 under %q", len(runs), runs[len(runs)-1].TaskID, res.Deferred.TaskIDs["c1"])
			}
			// The worker that holds the call is named on the answer's
			// attempt, so that it reaches that worker.
			if h := runs[len(runs)-1].ToolCallMetadata[tool.AnswerHolderMetaKey]; h != "worker-7" {
				t.Errorf("the answer's attempt names holder %v, want worker-7 (the deferral's)", h)
			}
		})
	}
}
