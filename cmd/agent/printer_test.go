package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/offload-dev/offload/pkg/agent"
	"github.com/offload-dev/offload/pkg/progress"
)

// backgroundEvents is a run with one background task, as the agent emits
// it.
func backgroundEvents() []agent.Event {
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	ev := func(d time.Duration, e agent.Event) agent.Event {
		e.RunID, e.ConversationID, e.At = "R", "C", t0.Add(d)
		return e
	}
	return []agent.Event{
		ev(0, agent.Event{Type: agent.EventToolCall, Tool: "sleep", ToolCallID: "c1", Args: json.RawMessage(`{}`), TaskID: "T1"}),
		ev(0, agent.Event{Type: agent.EventBackgroundTaskStarted, Tool: "sleep", ToolCallID: "c1", TaskID: "T1"}),
		ev(2*time.Second, agent.Event{Type: agent.EventProgress, Tool: "sleep", ToolCallID: "c1", TaskID: "T1", Message: "slept 2s", Fraction: progress.Fraction(0.4)}),
		ev(3*time.Second, agent.Event{Type: agent.EventModelRequestStarted}),
		ev(5*time.Second, agent.Event{Type: agent.EventBackgroundTaskFinished, Tool: "sleep", ToolCallID: "c1", TaskID: "T1", Status: "completed"}),
		ev(6*time.Second, agent.Event{Type: agent.EventModelRequestStarted}),
	}
}

func TestLiveViewShowsBackgroundTasks(t *testing.T) {
	t.Parallel()
	var stdout, stderr bytes.Buffer
	p := newPrinter(env{stdout: &stdout, stderr: &stderr}, false)
	for _, e := range backgroundEvents() {
		p.event(e)
	}
	got := stderr.String()
	for _, want := range []string{
		"⇢ sleep task T1 running in the background\n",
		"… sleep task T1 [2s]: slept 2s (40%)\n",
		"⋯ sleep task T1 running for 3s: slept 2s (40%)\n",
		"⇠ sleep task T1 completed after 5s\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("live view lacks %q:\n%s", want, got)
		}
	}
	if strings.Count(got, "⋯") != 1 {
		t.Errorf("a finished task is still shown as running:\n%s", got)
	}
	if stdout.Len() != 0 {
		t.Errorf("stdout = %q", stdout.String())
	}
}

func TestJSONLinesCarryBackgroundEvents(t *testing.T) {
	t.Parallel()
	var stdout, stderr bytes.Buffer
	p := newPrinter(env{stdout: &stdout, stderr: &stderr}, true)
	for _, e := range backgroundEvents() {
		p.event(e)
	}
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	if len(lines) != 6 {
		t.Fatalf("%d lines:\n%s", len(lines), stdout.String())
	}
	want := []string{
		`"task_id":"T1"`,
		`"type":"background_task_started"`,
		`"type":"progress"`,
		`"type":"model_request_started"`,
		`"status":"completed"`,
	}
	for i, w := range want {
		if !strings.Contains(lines[i], w) {
			t.Errorf("line %d = %s, want %s", i, lines[i], w)
		}
	}
	var started map[string]any
	if err := json.Unmarshal([]byte(lines[1]), &started); err != nil || started["tool_call_id"] != "c1" || started["tool"] != "sleep" {
		t.Errorf("started line %s", lines[1])
	}
}
