package background_test

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/offload-dev/offload/internal/offloadtest"
	"github.com/offload-dev/offload/pkg/agent"
	"github.com/offload-dev/offload/pkg/agent/background"
	"github.com/offload-dev/offload/pkg/llm"
	"github.com/offload-dev/offload/pkg/message"
	"github.com/offload-dev/offload/pkg/tool"
)

// An external call made non-blocking: the model gets the acknowledgement
// at once, the answer given later is its result as a follow-up, and the
// events are deferred_tool_requests, then deferred_tool_results when the
// answer is applied, with no pause between them.
func TestNonBlockingExternalAnswer(t *testing.T) {
	t.Parallel()
	ask := tool.MustNew(tool.Def{Name: "ask_ops", Parameters: []byte(`{"type":"object","properties":{}}`)}, nil)
	d := background.NewDecisions()
	m := model(func(n int, req *llm.Request) *llm.Response {
		switch {
		case n == 0:
			return calls(call("ask_ops", "c1", "{}"))
		case strings.Contains(lastUserText(req), "completed."):
			return text("done")
		}
		return text("waiting")
	})
	var mu sync.Mutex
	var types []agent.EventType
	a := newAgentCfg(t, agent.Config{Model: m, Capabilities: []agent.Capability{background.Tools(background.Config{
		NonBlocking: &background.NonBlockingConfig{Tools: background.SelectAll(), Waiter: d}})}}, ask)
	type ran struct {
		res *agent.Result
		err error
	}
	out := make(chan ran, 1)
	go func() {
		res, err := a.Run(t.Context(), "go", &agent.RunOptions{OnEvent: func(e agent.Event) {
			mu.Lock()
			types = append(types, e.Type)
			mu.Unlock()
		}})
		out <- ran{res, err}
	}()
	asked, signal := d.Asked()
	for len(asked) == 0 {
		select {
		case <-signal:
		case r := <-out:
			t.Fatalf("the run returned before it waited for the answer: %v", r.err)
		}
		asked, signal = d.Asked()
	}
	if len(asked) != 1 || asked[0].Tool != "ask_ops" || !asked[0].NonBlocking {
		t.Fatalf("asked = %+v", asked)
	}
	if err := d.Decide(asked[0].TaskID, "42"); err != nil {
		t.Fatal(err)
	}
	r := offloadtest.WaitOrTimeout(t, out, "the run to return")
	if r.err != nil {
		t.Fatal(r.err)
	}
	ack := returnContent(t, m.Requests()[1].Messages[len(m.Requests()[1].Messages)-1].Parts[0])
	wantAck := "Tool 'ask_ops' is waiting for an answer from outside as task " + asked[0].TaskID + ". The outcome will arrive later as a follow-up message; continue with other work meanwhile."
	if ack != wantAck {
		t.Errorf("ack = %q, want %q", ack, wantAck)
	}
	want := "Background tool 'ask_ops' (task " + asked[0].TaskID + ") completed.\nResult: 42"
	if got := lastUserText(m.Requests()[len(m.Requests())-1]); got != want {
		t.Errorf("follow-up = %q, want %q", got, want)
	}
	if err := d.Decide(asked[0].TaskID, "43"); err == nil {
		t.Error("a second answer was taken")
	}
	mu.Lock()
	defer mu.Unlock()
	var order []agent.EventType
	for _, ty := range types {
		switch ty {
		case agent.EventDeferredToolRequests, agent.EventDeferredToolResults, agent.EventFinal:
			order = append(order, ty)
		}
	}
	wantOrder := []agent.EventType{agent.EventDeferredToolRequests, agent.EventDeferredToolResults, agent.EventFinal}
	if len(order) != 3 || order[0] != wantOrder[0] || order[1] != wantOrder[1] || order[2] != wantOrder[2] {
		t.Errorf("events = %v, want %v", order, wantOrder)
	}
	if r.res.Usage.ToolCalls != 1 {
		t.Errorf("tool_calls = %d, want 1 (an answered call counts once)", r.res.Usage.ToolCalls)
	}
}

// lastUserText is the first text of the last user prompt of req.
func lastUserText(req *llm.Request) string {
	var out string
	for _, msg := range req.Messages {
		for _, p := range msg.Parts {
			if u, ok := p.(message.UserPrompt); ok && len(u.Content) > 0 {
				out = u.Content[0].Text
			}
		}
	}
	return out
}

// NonBlockingCalls alone makes the run's approvals non-blocking (the
// in-process executor runs the approved call) without adding the
// background instructions to the system prompt.
func TestNonBlockingCallsAlone(t *testing.T) {
	t.Parallel()
	var runs atomic.Int32
	deploy := tool.Func("deploy", "", func(context.Context, *tool.RunContext, struct{}) (string, error) {
		runs.Add(1)
		return "deployed", nil
	}, tool.NeedsApproval())
	d := background.NewDecisions()
	m := model(func(n int, req *llm.Request) *llm.Response {
		switch {
		case n == 0:
			return calls(call("deploy", "c1", "{}"))
		case strings.Contains(lastUserText(req), "completed."):
			return text("done")
		}
		asked, _ := d.Asked()
		if len(asked) == 1 {
			_ = d.Decide(asked[0].TaskID, true)
		}
		return text("waiting")
	})
	a := newAgentCfg(t, agent.Config{Model: m, Instructions: "Be brief.",
		Capabilities: []agent.Capability{background.NonBlockingCalls(background.NonBlockingConfig{Tools: background.SelectAll(), Waiter: d})}}, deploy)
	res, err := a.Run(t.Context(), "go", nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Output != "done" || runs.Load() != 1 {
		t.Errorf("output %q, deploy ran %d times; want done, once", res.Output, runs.Load())
	}
	sys, _ := m.Requests()[0].Messages[0].Parts[0].(message.SystemPrompt)
	if sys.Content != "Be brief." {
		t.Errorf("system prompt %q, want only the agent's instructions", sys.Content)
	}
}

// A decision's metadata reaches the approved call's RunContext as its
// ToolCallMetadata, and the deferred_tool_results event carries it.
func TestNonBlockingDecisionMetadata(t *testing.T) {
	t.Parallel()
	got := make(chan map[string]any, 1)
	deploy := tool.Func("deploy", "", func(_ context.Context, rc *tool.RunContext, _ struct{}) (string, error) {
		got <- rc.ToolCallMetadata
		return "deployed", nil
	}, tool.NeedsApproval())
	d := background.NewDecisions()
	m := model(func(n int, req *llm.Request) *llm.Response {
		switch {
		case n == 0:
			return calls(call("deploy", "c1", "{}"))
		case strings.Contains(lastUserText(req), "completed."):
			return text("done")
		}
		asked, _ := d.Asked()
		_ = d.Decide(asked[0].TaskID, background.DecisionWithMetadata{Approval: true, Metadata: map[string]any{"ticket": "OPS-7"}})
		return text("waiting")
	})
	var mu sync.Mutex
	var results []agent.Event
	a := newAgentCfg(t, agent.Config{Model: m, Capabilities: []agent.Capability{background.NonBlockingCalls(background.NonBlockingConfig{Tools: background.SelectAll(), Waiter: d})}}, deploy)
	if _, err := a.Run(t.Context(), "go", &agent.RunOptions{OnEvent: func(e agent.Event) {
		if e.Type == agent.EventDeferredToolResults {
			mu.Lock()
			results = append(results, e)
			mu.Unlock()
		}
	}}); err != nil {
		t.Fatal(err)
	}
	if md := offloadtest.WaitOrTimeout(t, got, "deploy to run"); md["ticket"] != "OPS-7" {
		t.Errorf("ToolCallMetadata = %v", md)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(results) != 1 || results[0].Results.Approvals["c1"] != true || results[0].Results.Metadata["c1"]["ticket"] != "OPS-7" {
		t.Errorf("deferred_tool_results = %+v", results)
	}
}

// A non-blocking external call whose answer goes to its next attempt (an
// MCP elicitation, SPEC §16): the model keeps working; the answer runs
// the tool again, under the same task, with the answer as its input (and
// the worker that holds the call named), and what that returns is the
// follow-up.
func TestNonBlockingAnswerToNextAttempt(t *testing.T) {
	t.Parallel()
	var runs atomic.Int32
	var task, holder atomic.Value
	ask := tool.Func("ask", "", func(_ context.Context, rc *tool.RunContext, _ struct{}) (string, error) {
		runs.Add(1)
		ans, ok := rc.ToolCallMetadata[tool.AnswerMetaKey].(map[string]any)
		if !ok {
			return "", &tool.CallDeferred{Metadata: map[string]any{tool.AnswerToMetaKey: tool.AnswerToNextAttempt, tool.AnswerHolderMetaKey: "worker-7"}}
		}
		task.Store(rc.TaskID)
		holder.Store(rc.ToolCallMetadata[tool.AnswerHolderMetaKey])
		return "hello " + ans["content"].(map[string]any)["name"].(string), nil
	})
	d := background.NewDecisions()
	m := model(func(n int, req *llm.Request) *llm.Response {
		switch {
		case n == 0:
			return calls(call("ask", "c1", "{}"))
		case strings.Contains(lastUserText(req), "completed."):
			return text("done")
		}
		return text("waiting")
	})
	a := newAgentCfg(t, agent.Config{Model: m, Capabilities: []agent.Capability{background.Tools(background.Config{
		NonBlocking: &background.NonBlockingConfig{Tools: background.SelectAll(), Waiter: d}})}}, ask)
	type ran struct {
		res *agent.Result
		err error
	}
	out := make(chan ran, 1)
	go func() {
		res, err := a.Run(t.Context(), "go", nil)
		out <- ran{res, err}
	}()
	asked, signal := d.Asked()
	for len(asked) == 0 {
		select {
		case <-signal:
		case r := <-out:
			t.Fatalf("the run returned before it waited for the answer: %v", r.err)
		}
		asked, signal = d.Asked()
	}
	if err := d.Decide(asked[0].TaskID, map[string]any{"name": "Ada"}); err != nil {
		t.Fatal(err)
	}
	r := offloadtest.WaitOrTimeout(t, out, "the run to return")
	if r.err != nil {
		t.Fatal(r.err)
	}
	want := "Background tool 'ask' (task " + asked[0].TaskID + ") completed.\nResult: hello Ada"
	if got := lastUserText(m.Requests()[len(m.Requests())-1]); got != want {
		t.Errorf("follow-up = %q, want %q", got, want)
	}
	if runs.Load() != 2 || task.Load() != asked[0].TaskID {
		t.Errorf("the tool ran %d times, the second under task %v, want 2 under %s", runs.Load(), task.Load(), asked[0].TaskID)
	}
	if h := holder.Load(); h != "worker-7" {
		t.Errorf("the answer's attempt names holder %v, want worker-7 (the deferral's)", h)
	}
}
