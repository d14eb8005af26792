package agent_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/offload-dev/offload/pkg/agent"
	"github.com/offload-dev/offload/pkg/llm/testmodel"
	"github.com/offload-dev/offload/pkg/progress"
	"github.com/offload-dev/offload/pkg/tool"
)

// A call's report that it waits in its tool's queue (relayed from a
// worker, SPEC §19) is a queued event of the call, with its reason,
// place, key and until in its JSON line, not a progress event.
func TestQueuedEvent(t *testing.T) {
	t.Parallel()
	until := time.Date(2026, 12, 7, 22, 0, 0, 0, time.UTC)
	held := tool.Func("held", "Waits in a queue.", func(ctx context.Context, _ *tool.RunContext, _ struct{}) (string, error) {
		progress.ReportQueued(ctx, "01TASK", "queued: rate limit of tool held for tenant=acme, 3 ahead",
			progress.Queued{Reason: "rate", Ahead: 3, Key: "tenant=acme", Until: until})
		return "ran", nil
	})
	set, err := tool.NewSet(held)
	if err != nil {
		t.Fatal(err)
	}
	a, err := agent.New(agent.Config{Model: testmodel.New(testmodel.Config{}), Toolsets: []tool.Toolset{set}})
	if err != nil {
		t.Fatal(err)
	}
	var events []agent.Event
	if _, err := a.Run(t.Context(), "go", &agent.RunOptions{OnEvent: func(e agent.Event) { events = append(events, e) }}); err != nil {
		t.Fatal(err)
	}
	var queued []agent.Event
	for _, e := range events {
		switch e.Type {
		case agent.EventQueued:
			queued = append(queued, e)
		case agent.EventProgress:
			t.Errorf("a progress event: %+v", e)
		}
	}
	if len(queued) != 1 {
		t.Fatalf("%d queued events, want 1", len(queued))
	}
	raw, err := json.Marshal(queued[0])
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal(raw, &got); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"type": "queued", "task_id": "01TASK", "tool": "held", "reason": "rate", "ahead": 3.0, "key": "tenant=acme",
		"until": "2026-12-07T22:00:00Z", "message": "queued: rate limit of tool held for tenant=acme, 3 ahead"}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %v, want %v (%s)", k, got[k], v, raw)
		}
	}
	if got["tool_call_id"] == "" || got["tool_call_id"] == nil {
		t.Errorf("no tool_call_id: %s", raw)
	}
}
