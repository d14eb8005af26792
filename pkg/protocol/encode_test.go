package protocol

import (
	"bytes"
	"encoding/json"
	"math"
	"testing"
	"time"

	"github.com/offload-dev/offload/pkg/limits"
	"github.com/offload-dev/offload/pkg/message"
)

// The encoders must write exactly what json.Marshal writes, errors
// included.

func sameAsMarshal(t *testing.T, v any, got []byte, gotErr error) {
	t.Helper()
	want, wantErr := json.Marshal(v)
	if (gotErr == nil) != (wantErr == nil) || gotErr != nil && gotErr.Error() != wantErr.Error() {
		t.Fatalf("error %v, json.Marshal's %v", gotErr, wantErr)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("encoded\n%s\njson.Marshal\n%s", got, want)
	}
}

func TestEncodeTask(t *testing.T) {
	at := time.Date(2026, 11, 30, 15, 4, 5, 123456789, time.UTC)
	for _, task := range []Task{
		{},
		{TaskID: "01J", Tool: "lookup", Args: json.RawMessage(`{"q":"x","n":1}`), ConversationID: "01C"},
		{TaskID: "01J", Tool: "lookup", Args: json.RawMessage(" { \"q\" : [1, 2] }\n"), ConversationID: "01C",
			ToolCallID: "call_1", RunID: "run", Mode: ModeBackground, Metadata: map[string]any{"b": 1, "a": "<x>"},
			Approved: true, ToolCallMetadata: map[string]any{"k": []any{1.5, nil}}, Retry: 2, Attempt: -3,
			Deadline: at, CreatedAt: at.In(time.FixedZone("x", 3600)), Traceparent: "00-abc-def-01"},
		{TaskID: "a\"b\\c\n\u2028é<&>", Tool: "t", Args: json.RawMessage(`{"h":"<b>&amp;\u2028"}`), ConversationID: "\x00\xff"},
		{Args: json.RawMessage(`{"x":"—"}`)},
		{Args: json.RawMessage(`{"x":`)},
		{Args: json.RawMessage(``)},
		{Args: json.RawMessage(`{}`), Metadata: map[string]any{"f": math.Inf(1)}},
		{Args: json.RawMessage(`{}`), Deadline: time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)},
		{Args: json.RawMessage(`{}`), Metadata: map[string]any{}},
		{Args: json.RawMessage(`{}`), Tenant: "acme <&>", Agent: "ops",
			Limits: &limits.Limits{MaxInFlight: 2, Key: "tenant", Rate: &limits.Rate{Limit: 30, Period: limits.Duration(time.Minute)}}},
	} {
		got, err := EncodeTask(&task)
		sameAsMarshal(t, task, got, err)
	}
}

func TestEncodeResult(t *testing.T) {
	at := time.Date(2026, 11, 30, 15, 4, 5, 0, time.UTC)
	for _, res := range []Result{
		{},
		{TaskID: "01J", Status: StatusOK, Content: json.RawMessage(`"Found 20 rows"`), Worker: "w1", StartedAt: at, FinishedAt: at.Add(time.Millisecond)},
		{TaskID: "01J", ToolCallID: "c", Status: StatusError, ErrorType: "Panic", Message: "boom <&>",
			UserContent: []message.Content{{Type: "text", Text: "hi"}}, Metadata: map[string]any{"z": true}, Attempt: 4},
		{Status: StatusRetry, Content: json.RawMessage(" [1, {\"a\" : null}] ")},
		{Content: json.RawMessage(`{"bad"`)},
		{Content: json.RawMessage(`"\u003c"`), Message: "\t"},
		{StartedAt: time.Date(-1, 1, 1, 0, 0, 0, 0, time.UTC)},
		{Status: StatusError, ErrorType: ErrorRateLimited, RetryAfter: 2.5},
	} {
		got, err := EncodeResult(&res)
		sameAsMarshal(t, res, got, err)
	}
}

func FuzzEncode(f *testing.F) {
	f.Add("01J", "lookup", []byte(`{"q":"x"}`), "tc", "ok", []byte(`"r"`), int64(0), 0)
	f.Add("<\u2028>", "\x7f", []byte(` [ "&" ] `), "\xff", "", []byte(`{`), int64(1e18), -1)
	f.Fuzz(func(t *testing.T, id, name string, args []byte, str, status string, content []byte, nanos int64, n int) {
		at := time.Unix(0, nanos).UTC()
		task := Task{TaskID: id, Tool: name, Args: args, ConversationID: str, ToolCallID: str, RunID: name,
			Mode: Mode(status), Retry: n, Attempt: n, Deadline: at, Traceparent: str}
		if n%3 == 0 {
			task.Args = nil
			task.Metadata = map[string]any{str: name}
		}
		got, err := EncodeTask(&task)
		sameAsMarshal(t, task, got, err)
		res := Result{TaskID: id, ToolCallID: str, Status: Status(status), Content: content, Message: name,
			ErrorType: str, Worker: id, StartedAt: at, FinishedAt: at, Attempt: n}
		got, err = EncodeResult(&res)
		sameAsMarshal(t, res, got, err)

		// Appending to a buffer that holds something already (as a reused
		// buffer does) keeps it and adds the same bytes, or leaves it as it
		// was on error.
		prefix := []byte("prefix")
		buf := append(make([]byte, 0, 8), prefix...)
		if b, err := AppendTask(buf, &task); err != nil {
			if string(b) != "prefix" {
				t.Fatalf("AppendTask failed and left %q", b)
			}
		} else {
			sameAsMarshal(t, task, b[len(prefix):], nil)
		}
		if b, err := AppendResult(buf, &res); err != nil {
			if string(b) != "prefix" {
				t.Fatalf("AppendResult failed and left %q", b)
			}
		} else {
			sameAsMarshal(t, res, b[len(prefix):], nil)
		}
	})
}

// TestEncodeTimes checks the times written in place against json.Marshal.
func TestEncodeTimes(t *testing.T) {
	for _, at := range []time.Time{
		time.Date(2026, 11, 30, 15, 4, 5, 0, time.UTC),
		time.Date(2026, 11, 30, 15, 4, 5, 120000000, time.FixedZone("", -5*3600-30*60)),
		time.Date(0, 1, 1, 0, 0, 0, 1, time.UTC),
		time.Date(9999, 12, 31, 23, 59, 59, 999999999, time.FixedZone("", 14*3600)),
		time.Date(2026, 1, 1, 0, 0, 0, 0, time.FixedZone("", 30)),
		time.Date(-5, 1, 1, 0, 0, 0, 0, time.UTC),
		time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC).Add(time.Nanosecond),
		time.Now(),
	} {
		res := Result{StartedAt: at, FinishedAt: at}
		got, err := EncodeResult(&res)
		sameAsMarshal(t, res, got, err)
	}
}
