package agent_test

// One test per capability hook, with user-defined capabilities.

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/offload-dev/offload/pkg/agent"
	"github.com/offload-dev/offload/pkg/llm"
	"github.com/offload-dev/offload/pkg/message"
	"github.com/offload-dev/offload/pkg/tool"
)

type recordingWrapper struct {
	name string
	log  *[]string
}

func (w recordingWrapper) WrapRun(ctx context.Context, info *agent.RunInfo, next func(context.Context) (*agent.Result, error)) (*agent.Result, error) {
	*w.log = append(*w.log, "enter "+w.name)
	res, err := next(ctx)
	*w.log = append(*w.log, "leave "+w.name+" "+res.Output+" "+info.RunID[:0])
	return res, err
}

func TestRunWrapperWrapsTheRunInOrder(t *testing.T) {
	t.Parallel()
	var log []string
	a := newAgentCfg(t, agent.Config{Model: turns(text("out")), Capabilities: []agent.Capability{recordingWrapper{"a", &log}}})
	if _, err := a.Run(t.Context(), "go", &agent.RunOptions{Capabilities: []agent.Capability{recordingWrapper{"b", &log}}}); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(log, "|"); got != "enter a|enter b|leave b out |leave a out " {
		t.Errorf("order = %s", got)
	}
}

type preparer func(tools []*tool.Tool) ([]*tool.Tool, error)

func (p preparer) PrepareTools(_ context.Context, _ *agent.RunInfo, tools []*tool.Tool) ([]*tool.Tool, error) {
	return p(tools)
}

func TestToolsPreparerChangesOfferedTools(t *testing.T) {
	t.Parallel()
	keep, drop := times42("keep"), times42("drop")
	m := turns(calls(call("drop", "c1", `{"x":1}`)), text("done"))
	hide := preparer(func(tools []*tool.Tool) ([]*tool.Tool, error) {
		var out []*tool.Tool
		for _, t := range tools {
			if t.Name != "drop" {
				c := t.Clone()
				c.Description = "prepared"
				out = append(out, c)
			}
		}
		return out, nil
	})
	if _, err := newAgentCfg(t, agent.Config{Model: m, Capabilities: []agent.Capability{hide}}, keep, drop).Run(t.Context(), "go", nil); err != nil {
		t.Fatal(err)
	}
	defs := m.requests()[0].Tools
	if len(defs) != 1 || defs[0].Name != "keep" || defs[0].Description != "prepared" {
		t.Errorf("offered %+v", defs)
	}
	if r, ok := lastRequestParts(t, m, 1)[0].(message.RetryPrompt); !ok || !strings.HasPrefix(r.Content, "Unknown tool name: 'drop'") {
		t.Errorf("a hidden tool ran: %+v", lastRequestParts(t, m, 1))
	}
	failing := preparer(func([]*tool.Tool) ([]*tool.Tool, error) { return nil, errors.New("no tools today") })
	if _, err := newAgentCfg(t, agent.Config{Model: turns(text("x")), Capabilities: []agent.Capability{failing}}, keep).Run(t.Context(), "go", nil); err == nil || !strings.Contains(err.Error(), "no tools today") {
		t.Errorf("err = %v", err)
	}
}

type instructions string

func (i instructions) Instructions() string { return string(i) }

func TestInstructionsProviderAddsToSystemPrompt(t *testing.T) {
	t.Parallel()
	m := turns(text("a"), text("b"))
	a := newAgentCfg(t, agent.Config{Model: m, Instructions: "base", Capabilities: []agent.Capability{instructions("extra"), instructions("extra"), instructions("")}})
	res, err := a.Run(t.Context(), "go", nil)
	if err != nil {
		t.Fatal(err)
	}
	if sys := m.requests()[0].Messages[0].Parts[0].(message.SystemPrompt); sys.Content != "base\n\nextra" {
		t.Errorf("system prompt %q", sys.Content)
	}
	// Only a new conversation gets them.
	if _, err := a.Run(t.Context(), "again", &agent.RunOptions{History: res.Messages}); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(mustJSON(t, m.requests()[1].Messages), "extra"); n != 1 {
		t.Errorf("instructions added %d times", n)
	}
}

type requestHook func(req *message.Message) error

func (h requestHook) BeforeModelRequest(_ context.Context, _ *agent.RunInfo, req *message.Message) error {
	return h(req)
}

func TestModelRequestHookAddsParts(t *testing.T) {
	t.Parallel()
	m := turns(calls(call("t", "c1", `{"x":1}`)), text("done"))
	n := 0
	hook := requestHook(func(req *message.Message) error {
		n++
		req.Parts = append(req.Parts, message.UserText("note"))
		return nil
	})
	if _, err := newAgentCfg(t, agent.Config{Model: m, Capabilities: []agent.Capability{hook}}, times42("t")).Run(t.Context(), "go", nil); err != nil {
		t.Fatal(err)
	}
	if n != 2 {
		t.Errorf("hook ran %d times, want 2", n)
	}
	parts := lastRequestParts(t, m, 1)
	if _, ok := parts[0].(message.ToolReturn); !ok || parts[len(parts)-1].(message.UserPrompt).Content[0].Text != "note" {
		t.Errorf("request parts %+v", parts)
	}
	stop := requestHook(func(*message.Message) error { return errors.New("refused") })
	if _, err := newAgentCfg(t, agent.Config{Model: turns(text("x")), Capabilities: []agent.Capability{stop}}).Run(t.Context(), "go", nil); err == nil || err.Error() != "refused" {
		t.Errorf("err = %v", err)
	}
}

type stepHook struct {
	mu     sync.Mutex
	finals []bool
	extra  int // parts to add at the next final steps
}

func (h *stepHook) AfterStep(_ context.Context, _ *agent.RunInfo, final bool) ([]message.Part, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.finals = append(h.finals, final)
	if final && h.extra > 0 {
		h.extra--
		return []message.Part{message.UserText("one more thing")}, nil
	}
	return nil, nil
}

func TestStepHookFinalKeepsRunGoing(t *testing.T) {
	t.Parallel()
	m := turns(calls(call("t", "c1", `{"x":1}`)), text("first"), text("second"))
	h := &stepHook{extra: 1}
	res, err := newAgentCfg(t, agent.Config{Model: m, Capabilities: []agent.Capability{h}}, times42("t")).Run(t.Context(), "go", nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Output != "second" || len(m.requests()) != 3 {
		t.Errorf("output %q after %d requests", res.Output, len(m.requests()))
	}
	if got := mustJSON(t, h.finals); got != "[false,true,true]" {
		t.Errorf("finals = %s", got)
	}
	if p := lastRequestParts(t, m, 2); p[0].(message.UserPrompt).Content[0].Text != "one more thing" {
		t.Errorf("parts %+v", p)
	}
}

type callWrapper struct {
	name string
	log  *[]string
	mu   *sync.Mutex
}

func (w callWrapper) WrapToolCall(ctx context.Context, c *agent.ToolCall, next agent.ToolCallFunc) (any, error) {
	w.mu.Lock()
	*w.log = append(*w.log, w.name+":"+c.Call.ToolName+":"+string(c.Args))
	w.mu.Unlock()
	if c.Call.ToolName == "skipped" {
		return "short-circuited by " + w.name, nil
	}
	return next(ctx, c)
}

func TestToolCallWrapperWrapsExecution(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var log []string
	ran := false
	skipped := tool.Func("skipped", "", func(context.Context, *tool.RunContext, struct{}) (string, error) {
		ran = true
		return "ran", nil
	})
	m := turns(calls(call("t", "c1", `{"x":2}`)), calls(call("skipped", "c2", "{}")), text("done"))
	caps := []agent.Capability{callWrapper{"outer", &log, &mu}, callWrapper{"inner", &log, &mu}}
	if _, err := newAgentCfg(t, agent.Config{Model: m, Capabilities: caps}, times42("t"), skipped).Run(t.Context(), "go", nil); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(log, "|"); got != `outer:t:{"x":2}|inner:t:{"x":2}|outer:skipped:{}` {
		t.Errorf("log = %s", got)
	}
	if returnContent(t, lastRequestParts(t, m, 1)[0]) != "84" || ran || returnContent(t, lastRequestParts(t, m, 2)[0]) != "short-circuited by outer" {
		t.Errorf("results %+v %+v ran %v", lastRequestParts(t, m, 1), lastRequestParts(t, m, 2), ran)
	}
}

type callPreparer struct{}

func (callPreparer) PrepareToolCall(_ context.Context, _ *agent.RunInfo, pc *agent.PreparedCall) error {
	switch {
	case strings.Contains(pc.Args, `"bad"`):
		return tool.Retry("no bad args")
	case strings.Contains(pc.Args, `"tag"`):
		pc.Args = strings.Replace(pc.Args, `,"tag":1`, "", 1)
		pc.TaskID = "task-" + pc.Call.ToolCallID
	}
	return nil
}

type taskSeen struct{ ids *[]string }

func (w taskSeen) WrapToolCall(ctx context.Context, c *agent.ToolCall, next agent.ToolCallFunc) (any, error) {
	*w.ids = append(*w.ids, c.TaskID)
	return next(ctx, c)
}

func TestToolCallPreparerRewritesArgsAndNamesTask(t *testing.T) {
	t.Parallel()
	strict := tool.MustNew(tool.Def{Name: "strict", Parameters: []byte(`{"type":"object","properties":{"x":{"type":"integer"}},"additionalProperties":false}`)},
		func(_ context.Context, _ *tool.RunContext, args json.RawMessage) (any, error) {
			return string(args), nil
		})
	m := turns(calls(call("strict", "c1", `{"x":1,"bad":true}`)), calls(call("strict", "c2", `{"x":1,"tag":1}`)), text("done"))
	var ids []string
	var events []agent.Event
	_, err := newAgentCfg(t, agent.Config{Model: m, Capabilities: []agent.Capability{callPreparer{}, taskSeen{&ids}}}, strict).Run(t.Context(), "go", &agent.RunOptions{OnEvent: func(e agent.Event) {
		if e.Type == agent.EventToolCall {
			events = append(events, e)
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	if r, ok := lastRequestParts(t, m, 1)[0].(message.RetryPrompt); !ok || r.Content != "no bad args" {
		t.Errorf("retry %+v", lastRequestParts(t, m, 1))
	}
	if got := returnContent(t, lastRequestParts(t, m, 2)[0]); got != `{"x":1}` {
		t.Errorf("the tool got %s", got)
	}
	if len(ids) != 1 || ids[0] != "task-c2" || len(events) != 2 || events[1].TaskID != "task-c2" || events[0].TaskID != "" {
		t.Errorf("task ids %v events %+v", ids, events)
	}
	if b, _ := events[1].MarshalJSON(); !strings.Contains(string(b), `"task_id":"task-c2"`) {
		t.Errorf("json %s", b)
	}
	// The history keeps the model's own arguments.
	if got := m.requests()[2].Messages[3].Parts[0].(message.ToolCall).Args; got != `{"x":1,"tag":1}` {
		t.Errorf("history args %s", got)
	}
}

type reserver struct{ n int }

func (r reserver) WrapRun(ctx context.Context, info *agent.RunInfo, next func(context.Context) (*agent.Result, error)) (*agent.Result, error) {
	info.ReserveToolCalls(r.n)
	return next(ctx)
}

func TestReserveToolCallsCountsAgainstTheLimit(t *testing.T) {
	t.Parallel()
	m := model(func(int, *llm.Request) *llm.Response { return calls(call("t", "c1", `{"x":1}`)) })
	_, err := newAgentCfg(t, agent.Config{Model: m, Capabilities: []agent.Capability{reserver{2}}, Limits: agent.UsageLimits{ToolCalls: agent.Limit(2)}}, times42("t")).Run(t.Context(), "go", nil)
	var ule *agent.UsageLimitExceeded
	if !errors.As(err, &ule) || ule.Limit != "tool_calls_limit" || ule.Count != 3 {
		t.Fatalf("err = %v", err)
	}
}
