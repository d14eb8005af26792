package liveview_test

import (
	"encoding/json"
	"os"
	"time"

	"github.com/offload-dev/offload/pkg/agent"
	"github.com/offload-dev/offload/pkg/agent/liveview"
	"github.com/offload-dev/offload/pkg/progress"
)

// A run with one background task, as a person watching it sees it.
func ExampleView() {
	v := liveview.New(os.Stdout)
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, ev := range []agent.Event{
		{Type: agent.EventTextDelta, Delta: "Sleeping on it."},
		{Type: agent.EventToolCall, Tool: "sleep", ToolCallID: "c1", Args: json.RawMessage(`{"seconds": 5}`), TaskID: "T1", At: t0},
		{Type: agent.EventBackgroundTaskStarted, Tool: "sleep", ToolCallID: "c1", TaskID: "T1", At: t0},
		{Type: agent.EventProgress, Tool: "sleep", TaskID: "T1", Message: "slept 2s", Fraction: progress.Fraction(0.4), At: t0.Add(2 * time.Second)},
		{Type: agent.EventBackgroundTaskFinished, Tool: "sleep", TaskID: "T1", Status: "completed", At: t0.Add(5 * time.Second)},
		{Type: agent.EventFinal, Final: &agent.Final{Status: agent.StatusFinished, Output: "Rested."}},
	} {
		v.Event(ev)
	}
	// Output:
	// model: Sleeping on it.
	// → sleep {"seconds":5} (task T1)
	// ⇢ sleep task T1 running in the background
	// … sleep task T1 [2s]: slept 2s (40%)
	// ⇠ sleep task T1 completed after 5s
}
