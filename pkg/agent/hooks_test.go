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
	"github.com/offload-dev/offload/pkg/deferred"
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
	defs := m.Requests()[0].Tools
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
	if sys := m.Requests()[0].Messages[0].Parts[0].(message.SystemPrompt); sys.Content != "base\n\nextra" {
		t.Errorf("system prompt %q", sys.Content)
	}
	// Only a new conversation gets them.
	if _, err := a.Run(t.Context(), "again", &agent.RunOptions{History: res.Messages}); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(mustJSON(t, m.Requests()[1].Messages), "extra"); n != 1 {
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
	if res.Output != "second" || len(m.Requests()) != 3 {
		t.Errorf("output %q after %d requests", res.Output, len(m.Requests()))
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
	if got := m.Requests()[2].Messages[3].Parts[0].(message.ToolCall).Args; got != `{"x":1,"tag":1}` {
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

// idler is an IdleHook answering from a script, one entry per call
// (the zero Idle once the script ran out).
type idler struct {
	mu     sync.Mutex
	script []agent.Idle
	calls  int
}

func (h *idler) WhenIdle(context.Context, *agent.RunInfo) (agent.Idle, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.calls++
	if len(h.script) == 0 {
		return agent.Idle{}, nil
	}
	next := h.script[0]
	h.script = h.script[1:]
	return next, nil
}

// isText reports whether p is a user prompt of the one text s.
func isText(p message.Part, s string) bool {
	u, ok := p.(message.UserPrompt)
	return ok && len(u.Content) == 1 && u.Content[0].Text == s
}

// An IdleHook is asked when the model ended its turn: its parts give the
// model another turn, a pause or a suspend ends the run as such.
func TestIdleHookKeepsRunGoingOrEndsIt(t *testing.T) {
	t.Parallel()
	m := turns(text("first"), text("second"))
	h := &idler{script: []agent.Idle{{Parts: []message.Part{message.UserText("it arrived")}}}}
	res, err := newAgentCfg(t, agent.Config{Model: m, Capabilities: []agent.Capability{h}}).Run(t.Context(), "go", nil)
	if err != nil || res.Output != "second" || h.calls != 2 {
		t.Fatalf("%v %+v after %d idle calls", err, res, h.calls)
	}
	if p := lastRequestParts(t, m, 1); !isText(p[0], "it arrived") {
		t.Errorf("parts %+v", p)
	}

	paused, err := newAgentCfg(t, agent.Config{Model: turns(text("waiting")), Capabilities: []agent.Capability{&idler{script: []agent.Idle{{Pause: true}}}}}).Run(t.Context(), "go", nil)
	if err != nil || !paused.Paused() || paused.Output != "" || agent.StatusOf(paused, err) != agent.StatusPaused {
		t.Errorf("pause: %v %+v", err, paused)
	}
	suspended, err := newAgentCfg(t, agent.Config{Model: turns(text("waiting")), Capabilities: []agent.Capability{&idler{script: []agent.Idle{{Suspend: true}}}}}).Run(t.Context(), "go", nil)
	if err != nil || !suspended.Suspended || agent.StatusOf(suspended, err) != agent.StatusPaused {
		t.Errorf("suspend: %v %+v", err, suspended)
	}
}

// Before a request that carries nothing (a history continued without a
// prompt), an IdleHook is asked right after its capability's
// ModelRequestHook; what it gives is the request.
func TestIdleHookFillsAnEmptyRequest(t *testing.T) {
	t.Parallel()
	first, err := newAgent(t, turns(text("hello"))).Run(t.Context(), "hi", nil)
	if err != nil {
		t.Fatal(err)
	}
	history := first.Messages // continued without a prompt: nothing new for the model
	m := turns(text("done"))
	h := &idler{script: []agent.Idle{{Parts: []message.Part{message.UserText("outcome")}}}}
	res, err := newAgentCfg(t, agent.Config{Model: m, Capabilities: []agent.Capability{h}}).Run(t.Context(), "", &agent.RunOptions{History: history})
	if err != nil || res.Output != "done" {
		t.Fatalf("%v %+v", err, res)
	}
	// Asked twice: before the empty request, then when the model ended its turn.
	if h.calls != 2 {
		t.Errorf("%d idle calls", h.calls)
	}
	if p := lastRequestParts(t, m, 0); len(p) != 1 || !isText(p[0], "outcome") {
		t.Errorf("parts %+v", p)
	}
}

// holder is a DeferredHolder holding the calls of one tool.
type holder struct {
	tool string
	seen []deferred.PendingTask
	err  error
}

func (h *holder) HoldDeferred(_ context.Context, _ *agent.RunInfo, calls []*agent.DeferredCall) error {
	for _, c := range calls {
		h.seen = append(h.seen, c.Task)
		if c.Call.ToolName == h.tool && c.Result == nil {
			c.Result = message.ToolReturn{ToolName: c.Call.ToolName, ToolCallID: c.Call.ToolCallID, Content: json.RawMessage(`"kept aside"`)}
		}
	}
	return h.err
}

// A DeferredHolder takes calls out of the step before the handlers: a held
// call's result is the holder's, the others pause the run as usual; the
// results a failing holder set stand.
func TestDeferredHolderTakesCallsBeforeTheHandlers(t *testing.T) {
	t.Parallel()
	tools := []*tool.Tool{times42("held", tool.NeedsApproval()), times42("gated", tool.NeedsApproval())}
	m := turns(calls(call("held", "c1", `{"x":1}`), call("gated", "c2", `{"x":2}`)))
	h := &holder{tool: "held"}
	var results []string
	res, err := newAgentCfg(t, agent.Config{Model: m, AllowDeferred: true, Capabilities: []agent.Capability{h}}, tools...).Run(t.Context(), "go", &agent.RunOptions{OnEvent: func(e agent.Event) {
		if e.Type == agent.EventToolResult {
			results = append(results, e.ToolCallID+"="+string(e.Content))
		}
	}})
	if err != nil || !res.Paused() {
		t.Fatalf("%v %+v", err, res)
	}
	if len(res.Deferred.Approvals) != 1 || res.Deferred.Approvals[0].ToolCallID != "c2" {
		t.Errorf("deferred %+v, want c2 only", res.Deferred)
	}
	if len(h.seen) != 2 || h.seen[0].Kind != deferred.KindApproval || h.seen[0].TaskID == "" || string(h.seen[0].Args) != `{"x":1}` {
		t.Errorf("the holder saw %+v", h.seen)
	}
	if got := strings.Join(results, " "); got != `c1="kept aside"` {
		t.Errorf("tool results %s", got)
	}
	if got := mustJSON(t, res.Messages); !strings.Contains(got, `kept aside`) {
		t.Errorf("history %s", got)
	}

	// With a call that ran in the step, what the step did is recorded as
	// the run ends: the held call's result too.
	failing := &holder{tool: "held", err: errors.New("holder failed")}
	m = turns(calls(call("held", "c1", `{"x":1}`), call("gated", "c2", `{"x":2}`), call("t", "c3", `{"x":3}`)))
	res, err = newAgentCfg(t, agent.Config{Model: m, AllowDeferred: true, Capabilities: []agent.Capability{failing}},
		append(tools, times42("t"))...).Run(t.Context(), "go", nil)
	if err == nil || err.Error() != "holder failed" {
		t.Fatalf("err = %v", err)
	}
	if got := mustJSON(t, res.Messages); !strings.Contains(got, `kept aside`) {
		t.Errorf("the held call's result was lost: %s", got)
	}
}

// keeper is a HandoffKeeper that keeps every call handed off.
type keeper struct {
	suspend chan struct{}
	kept    []string
}

func (k *keeper) Suspending(context.Context, *agent.RunInfo) <-chan struct{} { return k.suspend }

func (k *keeper) KeepHandoff(_ context.Context, _ *agent.RunInfo, call *agent.ToolCall, h *agent.Handoff) (any, error) {
	k.kept = append(k.kept, call.Call.ToolCallID+"/"+call.TaskID)
	return "kept as " + h.TaskID, nil
}

// doneTask is a BackgroundTask that has finished.
type doneTask struct{ done chan struct{} }

func (t doneTask) Done() <-chan struct{} { return t.done }
func (doneTask) Outcome() (any, error)   { return nil, nil }
func (doneTask) Cancel(string)           {}
func (doneTask) Detach() bool            { return true }

// A tool hands its call off once Suspending fires; the run's
// HandoffKeeper keeps it and its acknowledgement is the call's result.
func TestHandoffKeeperKeepsTheCall(t *testing.T) {
	t.Parallel()
	k := &keeper{suspend: make(chan struct{})}
	close(k.suspend)
	task := doneTask{done: make(chan struct{})}
	close(task.done)
	waits := tool.Func("waits", "", func(ctx context.Context, _ *tool.RunContext, _ struct{}) (any, error) {
		<-agent.Suspending(ctx)
		return nil, &agent.Handoff{Task: task, TaskID: "t1"}
	})
	m := turns(calls(call("waits", "c1", `{}`)), text("done"))
	res, err := newAgentCfg(t, agent.Config{Model: m, Capabilities: []agent.Capability{k}}, waits).Run(t.Context(), "go", nil)
	if err != nil || res.Output != "done" {
		t.Fatalf("%v %+v", err, res)
	}
	if got := strings.Join(k.kept, " "); got != "c1/t1" {
		t.Errorf("kept %q", got)
	}
	if p := lastRequestParts(t, m, 1); returnContent(t, p[0]) != "kept as t1" {
		t.Errorf("parts %+v", p)
	}
	// Outside a run, or when no keeper can keep the call, Suspending is nil.
	if agent.Suspending(t.Context()) != nil {
		t.Error("Suspending outside a run")
	}
}
