package protocol

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/offload-dev/offload/pkg/message"
)

const (
	tConv = "01JQ0000000000000000000000"
	tTask = "01JQ0000000000000000000001"
)

var received = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

var fixedOpts = &DecodeOpts{ReceivedAt: received}

type decodeCase struct {
	name    string
	in      string
	field   string
	wantErr error
}

func checkDecodeErr(t *testing.T, payload string, tc decodeCase, err error) {
	t.Helper()
	if !errors.Is(err, tc.wantErr) {
		t.Fatalf("%s: err = %v, want %v", tc.in, err, tc.wantErr)
	}
	var de *DecodeError
	if !errors.As(err, &de) {
		t.Fatalf("err %T is not *DecodeError", err)
	}
	if de.Payload != payload || de.Field != tc.field {
		t.Errorf("DecodeError{Payload: %q, Field: %q}, want {%q, %q}: %v", de.Payload, de.Field, payload, tc.field, err)
	}
	if !strings.Contains(err.Error(), "protocol: decode "+payload) {
		t.Errorf("error text %q lacks the payload kind", err)
	}
}

// common are errors every decoder reports the same way.
var common = []decodeCase{
	{"empty", ``, "", ErrMalformed},
	{"null", `null`, "", ErrMalformed},
	{"array", `[]`, "", ErrMalformed},
	{"string", `"x"`, "", ErrMalformed},
	{"truncated", `{"task_id":`, "", ErrMalformed},
	{"trailing garbage", `{} x`, "", ErrMalformed},
}

func TestDecodeTooLarge(t *testing.T) {
	t.Parallel()
	big := `{"pad":"` + strings.Repeat("x", DefaultMaxSize) + `"}`
	small := &DecodeOpts{MaxSize: 10}
	decoders := map[string]func([]byte, *DecodeOpts) error{
		"task":     func(b []byte, o *DecodeOpts) error { _, err := DecodeTask(b, o); return err },
		"result":   func(b []byte, o *DecodeOpts) error { _, err := DecodeResult(b, tTask, o); return err },
		"approval": func(b []byte, o *DecodeOpts) error { _, err := DecodeApproval(b, o); return err },
		"decision": func(b []byte, o *DecodeOpts) error { _, err := DecodeDecision(b, o); return err },
		"cancel":   func(b []byte, o *DecodeOpts) error { _, err := DecodeCancel(b, tTask, o); return err },
		"progress": func(b []byte, o *DecodeOpts) error { _, err := DecodeProgress(b, tTask, o); return err },
	}
	for name, decode := range decoders {
		checkDecodeErr(t, name, decodeCase{in: "big", wantErr: ErrTooLarge}, decode([]byte(big), nil))
		checkDecodeErr(t, name, decodeCase{in: "small", wantErr: ErrTooLarge}, decode([]byte(`{"approved":true}`), small))
		// A negative MaxSize lifts the limit: the error, if any, is not ErrTooLarge.
		if err := decode([]byte(big), &DecodeOpts{MaxSize: -1}); errors.Is(err, ErrTooLarge) {
			t.Errorf("%s: MaxSize -1 still refused: %v", name, err)
		}
		for _, tc := range common {
			checkDecodeErr(t, name, tc, decode([]byte(tc.in), nil))
		}
	}
}

func TestDecodeTask(t *testing.T) {
	t.Parallel()
	in := `{"task_id":"` + tTask + `","tool":"search","args":{ "q" : "x" },"conversation_id":"` + tConv + `",
		"tool_call_id":"call_1","run_id":"r1","mode":"background","metadata":{"k":1},"approved":true,
		"tool_call_metadata":{"by":"alice"},"retry":2,"attempt":1,"deadline":"2026-05-06T07:08:09Z",
		"created_at":"2026-05-06T07:00:00.5+02:00","traceparent":"00-abc-def-01","unknown":{"x":[1]}}`
	got, err := DecodeTask([]byte(in), fixedOpts)
	if err != nil {
		t.Fatal(err)
	}
	want := Task{
		TaskID: tTask, Tool: "search", Args: json.RawMessage(`{"q":"x"}`), ConversationID: tConv,
		ToolCallID: "call_1", RunID: "r1", Mode: ModeBackground, Metadata: map[string]any{"k": 1.0},
		Approved: true, ToolCallMetadata: map[string]any{"by": "alice"}, Retry: 2, Attempt: 1,
		Deadline:    time.Date(2026, 5, 6, 7, 8, 9, 0, time.UTC),
		CreatedAt:   time.Date(2026, 5, 6, 7, 0, 0, 5e8, time.FixedZone("", 2*3600)),
		Traceparent: "00-abc-def-01",
	}
	if !got.Deadline.Equal(want.Deadline) || !got.CreatedAt.Equal(want.CreatedAt) {
		t.Errorf("times: got %v %v", got.Deadline, got.CreatedAt)
	}
	got.Deadline, got.CreatedAt, want.Deadline, want.CreatedAt = time.Time{}, time.Time{}, time.Time{}, time.Time{}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got  %+v\nwant %+v", got, want)
	}

	minimal := `{"task_id":"` + tTask + `","tool":"search","args":{},"conversation_id":"` + tConv + `","mode":null}`
	got, err = DecodeTask([]byte(minimal), fixedOpts)
	if err != nil {
		t.Fatal(err)
	}
	if got.Mode != ModeInline || !got.CreatedAt.Equal(received) || !got.Deadline.IsZero() {
		t.Errorf("defaults: mode %q created_at %v deadline %v", got.Mode, got.CreatedAt, got.Deadline)
	}
}

func TestDecodeTaskErrors(t *testing.T) {
	t.Parallel()
	base := map[string]any{"task_id": tTask, "tool": "search", "args": map[string]any{}, "conversation_id": tConv}
	with := func(k string, v any) string {
		m := map[string]any{}
		for key, val := range base {
			m[key] = val
		}
		if v == nil {
			delete(m, k)
		} else {
			m[k] = v
		}
		b, _ := json.Marshal(m)
		return string(b)
	}
	for _, tc := range []decodeCase{
		{"no task_id", with("task_id", nil), "task_id", ErrMissingField},
		{"null task_id", strings.Replace(with("task_id", "X"), `"X"`, `null`, 1), "task_id", ErrMissingField},
		{"empty task_id", with("task_id", ""), "task_id", ErrMissingField},
		{"no tool", with("tool", nil), "tool", ErrMissingField},
		{"no args", with("args", nil), "args", ErrMissingField},
		{"no conversation", with("conversation_id", nil), "conversation_id", ErrMissingField},
		{"task_id not ULID", with("task_id", "nope"), "task_id", ErrInvalidField},
		{"task_id number", with("task_id", 5), "task_id", ErrInvalidField},
		{"task_id lower case", with("task_id", strings.ToLower(tTask)), "task_id", ErrInvalidField},
		{"conversation not ULID", with("conversation_id", "c1"), "conversation_id", ErrInvalidField},
		{"bad tool name", with("tool", "a.b"), "tool", ErrInvalidField},
		{"args array", with("args", []any{1}), "args", ErrInvalidField},
		{"args string", with("args", `{"a":1}`), "args", ErrInvalidField},
		{"bad mode", with("mode", "later"), "mode", ErrInvalidField},
		{"mode number", with("mode", 1), "mode", ErrInvalidField},
		{"metadata array", with("metadata", []any{}), "metadata", ErrInvalidField},
		{"approved string", with("approved", "yes"), "approved", ErrInvalidField},
		{"tool_call_metadata string", with("tool_call_metadata", "x"), "tool_call_metadata", ErrInvalidField},
		{"retry float", with("retry", 1.5), "retry", ErrInvalidField},
		{"retry negative", with("retry", -1), "retry", ErrInvalidField},
		{"attempt negative", with("attempt", -1), "attempt", ErrInvalidField},
		{"deadline not RFC 3339", with("deadline", "tomorrow"), "deadline", ErrInvalidField},
		{"deadline number", with("deadline", 12), "deadline", ErrInvalidField},
		{"created_at bad", with("created_at", "2026-13-01T00:00:00Z"), "created_at", ErrInvalidField},
		{"traceparent number", with("traceparent", 1), "traceparent", ErrInvalidField},
		{"tool_call_id object", with("tool_call_id", map[string]any{}), "tool_call_id", ErrInvalidField},
		{"run_id bool", with("run_id", true), "run_id", ErrInvalidField},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := DecodeTask([]byte(tc.in), nil)
			checkDecodeErr(t, "task", tc, err)
		})
	}
}

func TestDecodeResult(t *testing.T) {
	t.Parallel()
	got, err := DecodeResult([]byte(`{"content":"42"}`), tTask, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := Result{TaskID: tTask, Status: StatusOK, Content: json.RawMessage(`"42"`)}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("minimal: got %+v, want %+v", got, want)
	}

	in := `{"task_id":"` + tTask + `","tool_call_id":"c1","status":"ok","content":{"a": [1, 2]},
		"user_content":[{"type":"text","text":"hi"},{"type":"file","name":"a.png","media_type":"image/png","data_base64":"AAEC"}],
		"metadata":{"m":"v"},"worker":"w1","started_at":"2026-01-01T00:00:00Z","finished_at":"2026-01-01T00:00:01Z","extra":1}`
	got, err = DecodeResult([]byte(in), "", nil)
	if err != nil {
		t.Fatal(err)
	}
	if string(got.Content) != `{"a":[1,2]}` {
		t.Errorf("content = %s", got.Content)
	}
	wantUC := []message.Content{message.TextContent("hi"), message.FileContent("a.png", "image/png", []byte{0, 1, 2})}
	if !reflect.DeepEqual(got.UserContent, wantUC) {
		t.Errorf("user_content = %+v", got.UserContent)
	}
	if got.Worker != "w1" || got.FinishedAt.Sub(got.StartedAt) != time.Second || got.Metadata["m"] != "v" {
		t.Errorf("got %+v", got)
	}

	for _, status := range []Status{StatusRetry, StatusFailed, StatusError, StatusCancelled, StatusApprovalRequired, StatusCallDeferred} {
		got, err := DecodeResult([]byte(`{"status":"`+string(status)+`","message":"m"}`), tTask, nil)
		if err != nil || got.Status != status {
			t.Errorf("status %q: %+v %v", status, got, err)
		}
	}
	got, err = DecodeResult([]byte(`{"content":null}`), tTask, nil)
	if err != nil || string(got.Content) != "null" {
		t.Errorf("explicit null content: %q %v", got.Content, err)
	}
}

func TestDecodeResultErrors(t *testing.T) {
	t.Parallel()
	other := "01JQ0000000000000000000002"
	for _, tc := range []struct {
		decodeCase
		subjectTask string
	}{
		{decodeCase{"no task anywhere", `{}`, "task_id", ErrMissingField}, ""},
		{decodeCase{"task mismatch", `{"task_id":"` + other + `"}`, "task_id", ErrInvalidField}, tTask},
		{decodeCase{"task not ULID", `{"task_id":"x"}`, "task_id", ErrInvalidField}, ""},
		{decodeCase{"subject task not ULID", `{}`, "task_id", ErrInvalidField}, "x"},
		{decodeCase{"task_id number", `{"task_id":1}`, "task_id", ErrInvalidField}, tTask},
		{decodeCase{"bad status", `{"status":"done"}`, "status", ErrInvalidField}, tTask},
		{decodeCase{"status number", `{"status":0}`, "status", ErrInvalidField}, tTask},
		{decodeCase{"user_content object", `{"user_content":{}}`, "user_content", ErrInvalidField}, tTask},
		{decodeCase{"user_content bad type", `{"user_content":[{"type":"video"}]}`, "user_content[0].type", ErrInvalidField}, tTask},
		{decodeCase{"user_content bad base64", `{"user_content":[{"type":"file","data_base64":"!!"}]}`, "user_content", ErrInvalidField}, tTask},
		{decodeCase{"message number", `{"message":1}`, "message", ErrInvalidField}, tTask},
		{decodeCase{"error_type array", `{"error_type":[]}`, "error_type", ErrInvalidField}, tTask},
		{decodeCase{"metadata string", `{"metadata":"m"}`, "metadata", ErrInvalidField}, tTask},
		{decodeCase{"worker bool", `{"worker":false}`, "worker", ErrInvalidField}, tTask},
		{decodeCase{"started_at bad", `{"started_at":"yesterday"}`, "started_at", ErrInvalidField}, tTask},
		{decodeCase{"finished_at bad", `{"finished_at":1}`, "finished_at", ErrInvalidField}, tTask},
		{decodeCase{"tool_call_id number", `{"tool_call_id":1}`, "tool_call_id", ErrInvalidField}, tTask},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := DecodeResult([]byte(tc.in), tc.subjectTask, nil)
			checkDecodeErr(t, "result", tc.decodeCase, err)
		})
	}
}

func TestDecodeApproval(t *testing.T) {
	t.Parallel()
	in := `{"task_id":"` + tTask + `","tool_call_id":"c","tool":"rm","args":{"path":"/"},"metadata":{"why":"x"},
		"conversation_id":"` + tConv + `","run_id":"r"}`
	got, err := DecodeApproval([]byte(in), fixedOpts)
	if err != nil {
		t.Fatal(err)
	}
	want := Approval{TaskID: tTask, ToolCallID: "c", Tool: "rm", Args: json.RawMessage(`{"path":"/"}`),
		Metadata: map[string]any{"why": "x"}, ConversationID: tConv, RunID: "r", RequestedAt: received}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v\nwant %+v", got, want)
	}
}

func TestDecodeApprovalErrors(t *testing.T) {
	t.Parallel()
	ok := `"task_id":"` + tTask + `","tool":"rm","args":{},"conversation_id":"` + tConv + `"`
	for _, tc := range []decodeCase{
		{"no task", `{"tool":"rm","args":{},"conversation_id":"` + tConv + `"}`, "task_id", ErrMissingField},
		{"no tool", `{"task_id":"` + tTask + `","args":{},"conversation_id":"` + tConv + `"}`, "tool", ErrMissingField},
		{"no args", `{"task_id":"` + tTask + `","tool":"rm","conversation_id":"` + tConv + `"}`, "args", ErrMissingField},
		{"no conversation", `{"task_id":"` + tTask + `","tool":"rm","args":{}}`, "conversation_id", ErrMissingField},
		{"args array", `{"task_id":"` + tTask + `","tool":"rm","args":[],"conversation_id":"` + tConv + `"}`, "args", ErrInvalidField},
		{"bad tool", `{"task_id":"` + tTask + `","tool":"r m","args":{},"conversation_id":"` + tConv + `"}`, "tool", ErrInvalidField},
		{"bad task", `{"task_id":"t","tool":"rm","args":{},"conversation_id":"` + tConv + `"}`, "task_id", ErrInvalidField},
		{"bad conversation", `{"task_id":"` + tTask + `","tool":"rm","args":{},"conversation_id":"c"}`, "conversation_id", ErrInvalidField},
		{"metadata list", `{` + ok + `,"metadata":[]}`, "metadata", ErrInvalidField},
		{"run_id number", `{` + ok + `,"run_id":3}`, "run_id", ErrInvalidField},
		{"tool_call_id number", `{` + ok + `,"tool_call_id":3}`, "tool_call_id", ErrInvalidField},
		{"requested_at bad", `{` + ok + `,"requested_at":"now"}`, "requested_at", ErrInvalidField},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := DecodeApproval([]byte(tc.in), nil)
			checkDecodeErr(t, "approval", tc, err)
		})
	}
}

func TestDecodeDecision(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   string
		want Decision
	}{
		{`{"approved":true}`, Decision{Approved: true}},
		{`{"approved":true,"override_args":{"x": 1},"by":"alice","metadata":{"k":"v"}}`,
			Decision{Approved: true, OverrideArgs: json.RawMessage(`{"x":1}`), By: "alice", Metadata: map[string]any{"k": "v"}}},
		{`{"approved":false,"message":"why"}`, Decision{Message: "why"}},
		{`{"approved":true,"message":"ignored"}`, Decision{Approved: true}},
		{`{"approved":false,"override_args":null}`, Decision{}},
	} {
		got, err := DecodeDecision([]byte(tc.in), nil)
		if err != nil {
			t.Errorf("%s: %v", tc.in, err)
			continue
		}
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: got %+v, want %+v", tc.in, got, tc.want)
		}
	}
}

func TestDecodeDecisionErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []decodeCase{
		{"no approved", `{}`, "approved", ErrMissingField},
		{"null approved", `{"approved":null}`, "approved", ErrMissingField},
		{"approved string", `{"approved":"true"}`, "approved", ErrInvalidField},
		{"approved number", `{"approved":1}`, "approved", ErrInvalidField},
		{"override when denied", `{"approved":false,"override_args":{}}`, "override_args", ErrInvalidField},
		{"override array", `{"approved":true,"override_args":[]}`, "override_args", ErrInvalidField},
		{"message number", `{"approved":false,"message":1}`, "message", ErrInvalidField},
		{"metadata string", `{"approved":true,"metadata":"x"}`, "metadata", ErrInvalidField},
		{"by number", `{"approved":true,"by":1}`, "by", ErrInvalidField},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := DecodeDecision([]byte(tc.in), nil)
			checkDecodeErr(t, "decision", tc, err)
		})
	}
}

func TestDecodeCancel(t *testing.T) {
	t.Parallel()
	got, err := DecodeCancel([]byte(`{"reason":"user"}`), tTask, nil)
	if err != nil || got != (Cancel{TaskID: tTask, Reason: "user"}) {
		t.Errorf("got %+v %v", got, err)
	}
	for _, tc := range []struct {
		decodeCase
		subjectTask string
	}{
		{decodeCase{"no task", `{}`, "task_id", ErrMissingField}, ""},
		{decodeCase{"mismatch", `{"task_id":"` + tConv + `"}`, "task_id", ErrInvalidField}, tTask},
		{decodeCase{"not ULID", `{"task_id":"abc"}`, "task_id", ErrInvalidField}, ""},
		{decodeCase{"reason number", `{"reason":1}`, "reason", ErrInvalidField}, tTask},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := DecodeCancel([]byte(tc.in), tc.subjectTask, nil)
			checkDecodeErr(t, "cancel", tc.decodeCase, err)
		})
	}
}

func TestDecodeProgress(t *testing.T) {
	t.Parallel()
	got, err := DecodeProgress([]byte(`{"message":"half","fraction":0.5}`), tTask, fixedOpts)
	if err != nil {
		t.Fatal(err)
	}
	if got.TaskID != tTask || got.Message != "half" || got.Fraction == nil || *got.Fraction != 0.5 || !got.At.Equal(received) {
		t.Errorf("got %+v", got)
	}
	got, err = DecodeProgress([]byte(`{"fraction":null,"at":"2026-01-01T00:00:00Z"}`), tTask, fixedOpts)
	if err != nil || got.Fraction != nil || got.At.Year() != 2026 || got.At.Equal(received) {
		t.Errorf("got %+v %v", got, err)
	}
	for _, f := range []string{"0", "1", "0.0", "1e0"} {
		if _, err := DecodeProgress([]byte(`{"fraction":`+f+`}`), tTask, nil); err != nil {
			t.Errorf("fraction %s: %v", f, err)
		}
	}
	for _, tc := range []struct {
		decodeCase
		subjectTask string
	}{
		{decodeCase{"no task", `{}`, "task_id", ErrMissingField}, ""},
		{decodeCase{"mismatch", `{"task_id":"` + tConv + `"}`, "task_id", ErrInvalidField}, tTask},
		{decodeCase{"fraction above 1", `{"fraction":1.01}`, "fraction", ErrInvalidField}, tTask},
		{decodeCase{"fraction negative", `{"fraction":-0.1}`, "fraction", ErrInvalidField}, tTask},
		{decodeCase{"fraction string", `{"fraction":"0.5"}`, "fraction", ErrInvalidField}, tTask},
		{decodeCase{"fraction huge", `{"fraction":1e400}`, "fraction", ErrInvalidField}, tTask},
		{decodeCase{"message number", `{"message":1}`, "message", ErrInvalidField}, tTask},
		{decodeCase{"at bad", `{"at":"soon"}`, "at", ErrInvalidField}, tTask},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := DecodeProgress([]byte(tc.in), tc.subjectTask, nil)
			checkDecodeErr(t, "progress", tc.decodeCase, err)
		})
	}
}

// FuzzCompact checks that compact, which skips json.Compact for JSON
// without whitespace outside its strings, gives json.Compact's bytes.
func FuzzCompact(f *testing.F) {
	for _, s := range []string{`{"a":"b c","d":[1, 2]}`, `{"a":"\" x"}`, `"\\"`, ` 1 `, `{"a":"\\\" "}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, v []byte) {
		if !json.Valid(v) {
			return
		}
		var want bytes.Buffer
		if err := json.Compact(&want, v); err != nil {
			t.Fatal(err)
		}
		if got := compact(v); !bytes.Equal(got, want.Bytes()) {
			t.Fatalf("compact(%q) = %q, json.Compact %q", v, got, want.Bytes())
		}
	})
}

// The fields of fleet control (SPEC §19): a task's tenant, agent and
// limits (checked), a result's retry_after, a progress report's queued.
func TestDecodeFleetFields(t *testing.T) {
	conv, task := NewID(), NewID()
	tk, err := DecodeTask([]byte(`{"task_id":"`+task+`","tool":"t","args":{},"conversation_id":"`+conv+
		`","tenant":"acme","agent":"ops","limits":{"max_in_flight":2,"key":"tenant","rate":{"limit":30,"period":"1m"}}}`), nil)
	if err != nil || tk.Tenant != "acme" || tk.Agent != "ops" || tk.Limits.MaxInFlight != 2 || tk.Limits.Rate.Interval() != 2*time.Second {
		t.Errorf("task %+v, %v", tk, err)
	}
	for _, bad := range []string{`{"priority":9}`, `{"rate":{"limit":1,"period":"x"}}`, `5`} {
		_, err := DecodeTask([]byte(`{"task_id":"`+task+`","tool":"t","args":{},"conversation_id":"`+conv+`","limits":`+bad+`}`), nil)
		if !errors.Is(err, ErrInvalidField) || !strings.Contains(err.Error(), "limits") {
			t.Errorf("limits %s: %v, want an invalid field", bad, err)
		}
	}
	r, err := DecodeResult([]byte(`{"task_id":"`+task+`","status":"error","error_type":"RateLimited","retry_after":2}`), task, nil)
	if err != nil || r.RetryAfter != 2 {
		t.Errorf("result %+v, %v", r, err)
	}
	if _, err := DecodeResult([]byte(`{"task_id":"`+task+`","status":"error","retry_after":-1}`), task, nil); !errors.Is(err, ErrInvalidField) {
		t.Errorf("a negative retry_after: %v", err)
	}
	p, err := DecodeProgress([]byte(`{"message":"queued: rate limit of tool t, 3 ahead","queued":{"reason":"rate","ahead":3}}`), task, nil)
	if err != nil || p.Queued == nil || p.Queued.Ahead != 3 || p.Queued.Reason != "rate" {
		t.Errorf("progress %+v, %v", p, err)
	}
}
