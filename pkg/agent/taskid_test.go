package agent_test

import (
	"context"
	"sync"
	"testing"

	"github.com/offload-dev/offload/pkg/agent"
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
