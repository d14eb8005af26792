package agent_test

import (
	"context"
	"sync"
	"testing"

	"github.com/offload-dev/offload/pkg/agent"
	"github.com/offload-dev/offload/pkg/agent/background"
	"github.com/offload-dev/offload/pkg/tool"
)

// A call deferred before it runs (a tool that needs approval, an external
// tool) is named in its tool_call event with the task ID it pauses under.
func TestDeferredCallEventNamesItsTask(t *testing.T) {
	gated := tool.Func("gated", "", func(context.Context, *tool.RunContext, struct{}) (string, error) { return "ran", nil }, tool.NeedsApproval())
	ext, err := tool.External(tool.Def{Name: "ask", Parameters: []byte(`{"type":"object","properties":{}}`)})
	if err != nil {
		t.Fatal(err)
	}
	m := turns(calls(call("gated", "c1", "{}"), call("ask", "c2", "{}")))
	a := newAgentCfg(t, agent.Config{Model: m, AllowDeferred: true, Toolsets: []tool.Toolset{ext}}, gated)
	var mu sync.Mutex
	named := map[string]string{}
	res, err := a.Run(context.Background(), "go", &agent.RunOptions{OnEvent: func(e agent.Event) {
		if e.Type == agent.EventToolCall {
			mu.Lock()
			named[e.ToolCallID] = e.TaskID
			mu.Unlock()
		}
	}})
	if err != nil || !res.Paused() {
		t.Fatalf("%v paused %v", err, res.Paused())
	}
	for _, id := range []string{"c1", "c2"} {
		if want := res.Deferred.TaskIDs[id]; want == "" || named[id] != want {
			t.Errorf("%s: tool_call task %q, paused under %q", id, named[id], want)
		}
	}
}

// A background call whose args validator asks for approval never starts its
// task: it pauses under the task ID its tool_call event named.
func TestHeldBackgroundCallPausesUnderItsEventsTask(t *testing.T) {
	gated := tool.Func("report", "", func(context.Context, *tool.RunContext, struct{}) (string, error) { return "ran", nil },
		tool.Meta(map[string]any{"background": true}),
		tool.Validate(func(_ context.Context, rc *tool.RunContext, _ struct{}) error {
			if !rc.ToolCallApproved {
				return &tool.ApprovalRequired{}
			}
			return nil
		}))
	m := turns(calls(call("report", "c1", "{}")))
	a := newAgentCfg(t, agent.Config{Model: m, AllowDeferred: true, Capabilities: []agent.Capability{background.Tools(background.Config{})}}, gated)
	var mu sync.Mutex
	var named, started string
	res, err := a.Run(context.Background(), "go", &agent.RunOptions{OnEvent: func(e agent.Event) {
		mu.Lock()
		defer mu.Unlock()
		switch e.Type {
		case agent.EventToolCall:
			named = e.TaskID
		case agent.EventBackgroundTaskStarted:
			started = e.TaskID
		}
	}})
	if err != nil || !res.Paused() {
		t.Fatalf("%v paused %v", err, res.Paused())
	}
	if started != "" {
		t.Errorf("the held call started task %s", started)
	}
	if want := res.Deferred.TaskIDs["c1"]; want == "" || named != want {
		t.Errorf("tool_call task %q, paused under %q", named, want)
	}
}

// A pending call deferred again by a run that continues its history (no
// decision yet) keeps its task ID, and its tool_call event names that ID.
func TestReDeferredCallEventNamesItsTask(t *testing.T) {
	gated := tool.Func("gated", "", func(context.Context, *tool.RunContext, struct{}) (string, error) { return "ran", nil }, tool.NeedsApproval())
	m := turns(calls(call("gated", "c1", "{}")))
	a := newAgentCfg(t, agent.Config{Model: m, AllowDeferred: true}, gated)
	paused, err := a.Run(context.Background(), "go", nil)
	if err != nil || !paused.Paused() {
		t.Fatalf("%v", err)
	}
	var mu sync.Mutex
	var named string
	res, err := a.Run(context.Background(), "", &agent.RunOptions{History: paused.Messages, OnEvent: func(e agent.Event) {
		if e.Type == agent.EventToolCall {
			mu.Lock()
			named = e.TaskID
			mu.Unlock()
		}
	}})
	if err != nil || !res.Paused() {
		t.Fatalf("%v", err)
	}
	want := paused.Deferred.TaskIDs["c1"]
	if res.Deferred.TaskIDs["c1"] != want || named != want {
		t.Errorf("task %s; again deferred under %s, tool_call event named %s", want, res.Deferred.TaskIDs["c1"], named)
	}
}
