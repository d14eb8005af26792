package agent

import (
	"encoding/json"
	"time"

	"github.com/offload-dev/offload/pkg/deferred"
	"github.com/offload-dev/offload/pkg/message"
	"github.com/offload-dev/offload/pkg/progress"
)

// EventType names an [Event]. The values are the "type" field of the
// --json output lines (SPEC §6.3).
type EventType string

// Event types, in the order they typically occur.
const (
	EventRunStarted             EventType = "run_started"
	EventModelRequestStarted    EventType = "model_request_started"
	EventModelRequestRetry      EventType = "model_request_retry"
	EventTextDelta              EventType = "text_delta"
	EventToolCall               EventType = "tool_call"
	EventToolResult             EventType = "tool_result"
	EventDeferredToolRequests   EventType = "deferred_tool_requests"
	EventDeferredToolResults    EventType = "deferred_tool_results"
	EventBackgroundTaskStarted  EventType = "background_task_started"
	EventBackgroundTaskFinished EventType = "background_task_finished"
	EventProgress               EventType = "progress"
	// EventQueued says a call run on a worker waits in its tool's queue,
	// held by a limit (SPEC §19): Message says why in words, Queued in
	// fields. The call keeps its place in the run's tool_calls limit.
	EventQueued EventType = "queued"
	EventFinal  EventType = "final"
)

// Status is how a run ended.
type Status string

// Run statuses of the final event.
const (
	StatusFinished    Status = "finished"
	StatusPaused      Status = "paused"
	StatusFailed      Status = "failed"
	StatusInterrupted Status = "interrupted"
)

// Final is the content of the final event.
type Final struct {
	Status Status `json:"status"`
	Output string `json:"output"`
	// Error says why a failed or interrupted run ended (for an interrupt,
	// the cause of the run's context: "interrupted by SIGINT: live tasks
	// were cancelled" from the agent command).
	Error string `json:"error,omitempty"`
	// Pending lists what a paused run waits for, as its pending record
	// does: deferred calls, then background tasks still running.
	Pending []deferred.PendingTask `json:"pending"`
	Usage   message.Usage          `json:"usage"`
	// Err is the error the run returned (failed and interrupted runs), for
	// a caller that maps it, e.g. to an exit code (a [*UserError] is a
	// usage error); not part of the event's JSON.
	Err error `json:"-"`
}

// Event is something that happened during a run. Only the fields of its
// Type are set; MarshalJSON writes exactly those (SPEC §6.3).
type Event struct {
	Type           EventType
	RunID          string
	ConversationID string
	At             time.Time

	// Delta is the text of a text_delta.
	Delta string
	// Attempt and Reason describe a model_request_retry: the number of the
	// attempt starting and why the previous one failed. The text deltas
	// since the last model_request_started or model_request_retry are void.
	Attempt int
	Reason  string
	// ToolCallID and Tool identify the call of tool_call, tool_result and
	// background events.
	ToolCallID string
	Tool       string
	// Args are the model's arguments (tool_call).
	Args json.RawMessage
	// ArgsValid is nil when the arguments were not validated (denied or
	// externally answered calls).
	ArgsValid *bool
	// Outcome and Content describe a tool_result; Outcome is "retry" for a
	// retry prompt. Content is also a completed background task's result,
	// on its background_task_finished (SPEC §6.3).
	Outcome string
	Content json.RawMessage
	// Requests is the batch of deferred_tool_requests.
	Requests *deferred.Requests
	// Results are the handler's answers of deferred_tool_results.
	Results *deferred.Results
	// Answer, on the tool_result of an external call, says who answered
	// it, as the process that admitted the answer recorded it (session:
	// its offload.answer note, SPEC §21); written as "answer" only when
	// set.
	Answer map[string]any
	// TaskID and Status describe background and progress events.
	TaskID   string
	Status   string
	Message  string
	Fraction *float64
	// Queued says why a queued event's call waits.
	Queued *progress.Queued
	// Final is set on the final event.
	Final *Final
	// TraceID and SpanID are the W3C IDs (hex) of the run's span when the
	// run is traced (Config.TracerProvider, SPEC §14); empty otherwise.
	TraceID, SpanID string
}

// MarshalJSON writes the event as one --json line object.
func (e Event) MarshalJSON() ([]byte, error) {
	m := map[string]any{
		"type":            e.Type,
		"run_id":          e.RunID,
		"conversation_id": e.ConversationID,
		"at":              e.At.UTC().Format(time.RFC3339Nano),
	}
	if e.TraceID != "" {
		m["trace_id"], m["span_id"] = e.TraceID, e.SpanID
	}
	switch e.Type {
	case EventTextDelta:
		m["delta"] = e.Delta
	case EventModelRequestRetry:
		m["attempt"], m["reason"] = e.Attempt, e.Reason
	case EventToolCall:
		m["tool_call_id"], m["tool"] = e.ToolCallID, e.Tool
		m["args"] = argsValue(e.Args)
		if e.ArgsValid != nil {
			m["args_valid"] = *e.ArgsValid
		} else {
			m["args_valid"] = nil
		}
		if e.TaskID != "" {
			m["task_id"] = e.TaskID
		}
	case EventToolResult:
		m["tool_call_id"], m["tool"], m["outcome"] = e.ToolCallID, e.Tool, e.Outcome
		m["content"] = rawOrNull(e.Content)
		if len(e.Answer) > 0 {
			m["answer"] = e.Answer
		}
	case EventDeferredToolRequests:
		r := e.Requests
		if r == nil {
			r = &deferred.Requests{}
		}
		m["calls"], m["approvals"] = orEmpty(r.Calls), orEmpty(r.Approvals)
		m["metadata"], m["task_ids"] = orEmptyMap(r.Metadata), orEmptyStrMap(r.TaskIDs)
	case EventDeferredToolResults:
		res := deferred.Results{}
		if e.Results != nil {
			res = *e.Results
		}
		raw, err := json.Marshal(res)
		if err != nil {
			return nil, err
		}
		var parts struct {
			Calls     json.RawMessage `json:"calls"`
			Approvals json.RawMessage `json:"approvals"`
		}
		_ = json.Unmarshal(raw, &parts)
		m["calls"], m["approvals"] = parts.Calls, parts.Approvals
	case EventBackgroundTaskStarted:
		m["task_id"], m["tool"], m["tool_call_id"] = e.TaskID, e.Tool, e.ToolCallID
	case EventBackgroundTaskFinished:
		m["task_id"], m["tool"], m["status"] = e.TaskID, e.Tool, e.Status
		if len(e.Content) > 0 {
			m["content"] = e.Content // a completed task's result
		}
	case EventProgress:
		m["task_id"], m["message"] = e.TaskID, e.Message
		m["tool_call_id"], m["tool"] = e.ToolCallID, e.Tool
		if e.Fraction != nil {
			m["fraction"] = *e.Fraction
		} else {
			m["fraction"] = nil
		}
	case EventQueued:
		m["task_id"], m["message"] = e.TaskID, e.Message
		m["tool_call_id"], m["tool"] = e.ToolCallID, e.Tool
		if q := e.Queued; q != nil {
			m["reason"], m["ahead"] = q.Reason, q.Ahead
			if q.Key != "" {
				m["key"] = q.Key
			}
			if !q.Until.IsZero() {
				m["until"] = q.Until.UTC().Format(time.RFC3339Nano)
			}
		}
	case EventFinal:
		f := e.Final
		if f == nil {
			f = &Final{}
		}
		m["status"], m["output"], m["error"] = f.Status, f.Output, f.Error
		m["pending"] = f.Pending
		if f.Pending == nil {
			m["pending"] = []deferred.PendingTask{}
		}
		m["usage"] = f.Usage
	}
	return json.Marshal(m)
}

// argsValue returns the arguments as a JSON value when they parse, else as
// the raw string the model sent.
func argsValue(raw json.RawMessage) any {
	if len(raw) == 0 {
		return map[string]any{}
	}
	if json.Valid(raw) {
		return raw
	}
	return string(raw)
}

func rawOrNull(raw json.RawMessage) json.RawMessage {
	if len(raw) == 0 {
		return json.RawMessage("null")
	}
	return raw
}

func orEmpty(c []message.ToolCall) []message.ToolCall {
	if c == nil {
		return []message.ToolCall{}
	}
	return c
}

func orEmptyMap(m map[string]map[string]any) map[string]map[string]any {
	if m == nil {
		return map[string]map[string]any{}
	}
	return m
}

func orEmptyStrMap(m map[string]string) map[string]string {
	if m == nil {
		return map[string]string{}
	}
	return m
}
