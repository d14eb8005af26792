package liveview_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/offload-dev/offload/pkg/agent"
	"github.com/offload-dev/offload/pkg/agent/liveview"
	"github.com/offload-dev/offload/pkg/deferred"
	"github.com/offload-dev/offload/pkg/message"
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
	p := liveview.NewPrinter(&stdout, &stderr, false)
	for _, e := range backgroundEvents() {
		p.Event(e)
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
	p := liveview.NewPrinter(&stdout, &stderr, true)
	for _, e := range backgroundEvents() {
		p.Event(e)
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

// Human mode: what the model says before a tool call or another request
// goes to stderr ("model: …"), a retried attempt's text never; deferred
// calls are named with their task and how they were decided; the final
// text is left to stdout (finish prints it).
func TestLiveViewShowsTextAndDecisions(t *testing.T) {
	t.Parallel()
	var stdout, stderr bytes.Buffer
	p := liveview.NewPrinter(&stdout, &stderr, false)
	call := message.ToolCall{ToolName: "write_file", ToolCallID: "c1", Args: `{"path":"n"}`}
	ext := message.ToolCall{ToolName: "ask_human", ToolCallID: "c2", Args: `{}`}
	for _, e := range []agent.Event{
		{Type: agent.EventModelRequestStarted},
		{Type: agent.EventTextDelta, Delta: "lost "},
		{Type: agent.EventModelRequestRetry, Attempt: 2},
		{Type: agent.EventTextDelta, Delta: "Writing "},
		{Type: agent.EventTextDelta, Delta: "the note."},
		{Type: agent.EventToolCall, Tool: "write_file", ToolCallID: "c1", Args: json.RawMessage(call.Args)},
		{Type: agent.EventDeferredToolRequests, Requests: &deferred.Requests{Approvals: []message.ToolCall{call}, Calls: []message.ToolCall{ext}, TaskIDs: map[string]string{"c1": "T1", "c2": "T2"}}},
		{Type: agent.EventDeferredToolResults, Results: &deferred.Results{Approvals: map[string]any{"c1": deferred.ToolDenied{Message: "no"}}}},
		{Type: agent.EventModelRequestStarted},
		{Type: agent.EventTextDelta, Delta: "Done."},
		{Type: agent.EventFinal, Final: &agent.Final{Status: agent.StatusFinished, Output: "Done."}},
	} {
		p.Event(e)
	}
	got := stderr.String()
	want := "model: Writing the note.\n→ write_file {\"path\":\"n\"}\n? write_file task T1 needs approval\n? ask_human task T2 waits for an answer from outside\n! write_file task T1 denied: no\n"
	if got != want {
		t.Fatalf("stderr:\n%s\nwant:\n%s", got, want)
	}
}

// A run paused (SIGTERM, a deferred call) with a background task still
// running: the live view says the task runs on for the resume, never that
// it failed.
func TestLiveViewKeepsDetachedTasks(t *testing.T) {
	t.Parallel()
	var stdout, stderr bytes.Buffer
	p := liveview.NewPrinter(&stdout, &stderr, false)
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, e := range []agent.Event{
		{Type: agent.EventBackgroundTaskStarted, Tool: "sleep", ToolCallID: "c1", TaskID: "T1", At: t0},
		{Type: agent.EventFinal, At: t0.Add(2 * time.Second), Final: &agent.Final{Status: agent.StatusPaused, Pending: []deferred.PendingTask{
			{TaskID: "T1", ToolCallID: "c1", Kind: deferred.KindBackground, Tool: "sleep", Args: json.RawMessage(`{}`)},
			{TaskID: "T0", ToolCallID: "c0", Kind: deferred.KindBackground, Tool: "research", Args: json.RawMessage(`{}`)},
		}}},
	} {
		p.Event(e)
	}
	got := stderr.String()
	for _, want := range []string{
		"⇠ sleep task T1 still running after 2s; kept for the resume\n",
		// adopted from an earlier run: no start seen
		"⇠ research task T0 still running; kept for the resume\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("live view lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "failed") {
		t.Errorf("a kept task is shown as failed:\n%s", got)
	}
}

// The exit code of SPEC §6.1 is the command's, decided here from how the
// run ended (the agent library knows statuses, not exit codes): what
// pkg/agent's final events asserted before they stopped carrying it.
func TestExitCodeOfFinal(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		final *agent.Final
		want  int
	}{
		{&agent.Final{Status: agent.StatusFinished}, liveview.ExitOK},
		{&agent.Final{Status: agent.StatusPaused}, liveview.ExitPaused},
		{&agent.Final{Status: agent.StatusInterrupted, Err: context.Canceled}, liveview.ExitInterrupted},
		{&agent.Final{Status: agent.StatusFailed, Err: agent.ErrRunCancelled}, liveview.ExitFailed},
		{&agent.Final{Status: agent.StatusFailed, Err: fmt.Errorf("run: %w", &agent.UserError{Message: "bad"})}, liveview.ExitUsage},
		{&agent.Final{Status: agent.StatusFailed, Err: &liveview.Exit{Code: liveview.ExitUsage, Err: errors.New("--wait must be positive")}}, liveview.ExitUsage},
		{&agent.Final{Status: agent.StatusInterrupted, Err: &liveview.Exit{Code: liveview.ExitInterrupted}}, liveview.ExitInterrupted},
	} {
		if got := liveview.ExitCode(tc.final); got != tc.want {
			t.Errorf("%s %v: exit %d, want %d", tc.final.Status, tc.final.Err, got, tc.want)
		}
	}
}

// With --json the final event carries exit_code (SPEC §6.3), added by the
// printer.
func TestJSONFinalCarriesExitCode(t *testing.T) {
	t.Parallel()
	var stdout bytes.Buffer
	p := liveview.NewPrinter(&stdout, &bytes.Buffer{}, true)
	p.Event(agent.Event{Type: agent.EventFinal, RunID: "R", ConversationID: "C", Final: &agent.Final{Status: agent.StatusPaused, Pending: []deferred.PendingTask{
		{TaskID: "T1", ToolCallID: "c1", Kind: deferred.KindApproval, Tool: "deploy", Args: json.RawMessage(`{}`)},
	}}})
	var line map[string]any
	if err := json.Unmarshal(stdout.Bytes(), &line); err != nil {
		t.Fatalf("%s: %v", stdout.String(), err)
	}
	pending, _ := line["pending"].([]any)
	if line["exit_code"] != float64(liveview.ExitPaused) || line["status"] != "paused" || line["type"] != "final" || len(pending) != 1 {
		t.Fatalf("final line %s", stdout.String())
	}
	for _, field := range []string{"task_id", "kind", "tool", "args", "tool_call_id"} {
		if _, ok := pending[0].(map[string]any)[field]; !ok {
			t.Errorf("pending entry lacks %s: %s", field, stdout.String())
		}
	}
}
