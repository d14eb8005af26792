package agui

import (
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/ag-ui-protocol/ag-ui/sdks/community/go/pkg/core/events"
)

// TestTranslateBackground: a background call's acknowledgement is its
// first result and, when its task ends, a second result under the call's
// ID, which the task's events name only at its start; a task this stream
// did not see start is a CUSTOM event, never a result without a call.
func TestTranslateBackground(t *testing.T) {
	var got []events.Event
	s := &stream{f: &Face{cfg: Config{Now: time.Now, Logger: slog.New(slog.DiscardHandler)}}, ctx: context.Background(), run: "r",
		emit: func(_ string, ev events.Event) error { got = append(got, ev); return nil }}
	for _, raw := range []string{
		`{"type":"model_request_started"}`,
		`{"type":"text_delta","delta":"working "}`,
		`{"type":"tool_call","tool_call_id":"c1","tool":"research","args":{"q":"x"}}`,
		`{"type":"tool_result","tool_call_id":"c1","tool":"research","outcome":"success","content":"started in the background"}`,
		`{"type":"background_task_started","task_id":"T1","tool":"research","tool_call_id":"c1"}`,
		`{"type":"background_task_finished","task_id":"T1","tool":"research","status":"completed","content":"found 3 papers"}`,
		`{"type":"tool_call","tool_call_id":"c2","tool":"research","args":{"q":"y"}}`,
		`{"type":"tool_result","tool_call_id":"c2","tool":"research","outcome":"success","content":"started in the background"}`,
		`{"type":"background_task_started","task_id":"T2","tool":"research","tool_call_id":"c2"}`,
		`{"type":"background_task_finished","task_id":"T2","tool":"research","status":"failed"}`,
		`{"type":"background_task_finished","task_id":"T9","tool":"research","status":"failed"}`,
		`not an event`,
	} {
		if done, err := s.translate(json.RawMessage(raw)); done || err != nil {
			t.Fatalf("%s: %v %v", raw, done, err)
		}
	}
	var types []string
	results := map[string][]string{}
	for _, ev := range got {
		types = append(types, string(ev.Type()))
		if r, ok := ev.(*events.ToolCallResultEvent); ok {
			results[r.ToolCallID] = append(results[r.ToolCallID], r.Content)
		}
	}
	want := "STEP_STARTED TEXT_MESSAGE_START TEXT_MESSAGE_CONTENT TEXT_MESSAGE_END TOOL_CALL_START TOOL_CALL_ARGS TOOL_CALL_END TOOL_CALL_RESULT CUSTOM TOOL_CALL_RESULT " +
		"TOOL_CALL_START TOOL_CALL_ARGS TOOL_CALL_END TOOL_CALL_RESULT CUSTOM TOOL_CALL_RESULT CUSTOM"
	if strings.Join(types, " ") != want {
		t.Fatalf("events:\n%s\nwant\n%s", strings.Join(types, " "), want)
	}
	// A completed task's second result is its result; a failed one's says so.
	if r := results["c1"]; len(r) != 2 || r[0] != "started in the background" || r[1] != "found 3 papers" {
		t.Fatalf("the completed call's results: %q", r)
	}
	if r := results["c2"]; len(r) != 2 || r[1] != "background task T2 failed" {
		t.Fatalf("the failed call's results: %q", r)
	}
	if len(results) != 2 {
		t.Fatalf("results: %v", results)
	}
}
