package message_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/offload-dev/offload/pkg/message"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// goldenV2 is the current form; goldenV1 is a history written by version 1,
// which must stay readable.
const (
	goldenV2 = "history_v2.json"
	goldenV1 = "history_v1.json"
)

// goldenHistory exercises every part kind, every outcome, metadata on
// messages and returns, usage, model name, finish reason, IDs and
// timestamps (with and without sub-second precision).
func goldenHistory() message.History {
	ts := func(sec, nsec int) time.Time { return time.Date(2025, 3, 14, 15, 9, sec, nsec, time.UTC) }
	const run, conv = "01JQ8Z4M1ZK0Y6T3H5W7R9C2AB", "01JQ8Z4M1ZK0Y6T3H5W7R9C2CD"
	return message.History{
		{
			Role: message.RoleRequest,
			Parts: []message.Part{
				message.SystemPrompt{Content: "You are a careful assistant."},
				message.UserPrompt{Content: []message.Content{
					message.TextContent("Summarise this file, then delete it."),
					message.FileContent("notes.txt", "text/plain", []byte("hello\x00world")),
				}},
			},
			RunID: run, ConversationID: conv, Timestamp: ts(26, 0),
		},
		{
			Role: message.RoleResponse,
			Parts: []message.Part{
				message.Thinking{Content: "The user wants a summary first.", Signature: "sig-1", ID: "rs_1", Source: "reasoning_content"},
				message.Text{Content: "Let me look."},
				message.ToolCall{ToolName: "read_file", ToolCallID: "call_1", Args: `{"path":"notes.txt"}`,
					ProviderExtra: `{"google":{"thought_signature":"c2ln"}}`},
				message.ToolCall{ToolName: "delete_file", ToolCallID: "call_2", Args: `{"path":"notes.txt"}`},
				message.ToolCall{ToolName: "search", ToolCallID: "call_3", Args: `{"q": "unterminated`},
				message.ToolCall{ToolName: "get_time", ToolCallID: "call_4", Args: ""},
				message.ToolCall{ToolName: "fetch", ToolCallID: "call_5", Args: `{"url":"https://example.com/?a=1&b=<2>"}`},
				message.ToolCall{ToolName: "sleep", ToolCallID: "call_6", Args: `{"seconds":30}`},
			},
			RunID: run, ConversationID: conv, Timestamp: ts(27, 123456789),
			ModelName:    "gpt-4o-mini",
			FinishReason: "tool_calls",
			Usage:        message.Usage{Requests: 1, InputTokens: 120, OutputTokens: 48},
		},
		{
			Role: message.RoleRequest,
			Parts: []message.Part{
				message.ToolReturn{ToolName: "read_file", ToolCallID: "call_1", Content: json.RawMessage(`"hello world"`),
					Outcome: message.OutcomeSuccess, Metadata: map[string]any{"bytes": 11.0, "path": "notes.txt"}},
				message.ToolReturn{ToolName: "delete_file", ToolCallID: "call_2", Content: json.RawMessage(`"The tool call was denied."`),
					Outcome: message.OutcomeDenied},
				message.RetryPrompt{ToolName: "search", ToolCallID: "call_3",
					Content: "invalid JSON: unexpected end of JSON input"},
				message.ToolReturn{ToolName: "get_time", ToolCallID: "call_4", Content: json.RawMessage(`{"iso":"2025-03-14T15:09:27Z","unix":1741964967}`)},
				message.ToolReturn{ToolName: "fetch", ToolCallID: "call_5", Content: json.RawMessage(`"PathError"`),
					Outcome: message.OutcomeFailed},
				message.ToolReturn{ToolName: "sleep", ToolCallID: "call_6", Content: json.RawMessage(`"The tool call was cancelled."`),
					Outcome: message.OutcomeCancelled, Metadata: map[string]any{"interrupted_by": "shutdown"}},
				message.UserPrompt{Content: []message.Content{message.TextContent("Also: the file was large.")}},
			},
			RunID: run, ConversationID: conv, Timestamp: ts(28, 500000000),
			Metadata: map[string]any{
				"approved_by": "alice",
				"decisions":   []any{map[string]any{"id": "call_2", "approved": false}},
				"score":       0.75,
			},
		},
		{
			Role:  message.RoleResponse,
			Parts: []message.Part{message.Text{Content: "The file says hello world. I was not allowed to delete it."}},
			RunID: run, ConversationID: conv, Timestamp: ts(29, 0),
			ModelName:    "gpt-4o-mini",
			FinishReason: "stop",
			Usage:        message.Usage{Requests: 1, ToolCalls: 3, InputTokens: 300, OutputTokens: 20},
		},
	}
}

// encodeGolden is the on-disk form of a history: its JSON, indented with two
// spaces, followed by a newline.
func encodeGolden(t *testing.T, h message.History) []byte {
	t.Helper()
	b, err := json.Marshal(h)
	if err != nil {
		t.Fatalf("marshal: %v", err)
	}
	var buf bytes.Buffer
	if err := json.Indent(&buf, b, "", "  "); err != nil {
		t.Fatalf("indent: %v", err)
	}
	buf.WriteByte('\n')
	return buf.Bytes()
}

func TestGolden(t *testing.T) {
	t.Parallel()
	path := filepath.Join("testdata", goldenV2)
	if *update {
		if err := os.WriteFile(path, encodeGolden(t, goldenHistory()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read golden (run go test ./pkg/message -run TestGolden -update): %v", err)
	}

	// A history written by an earlier process reads back identically.
	var h message.History
	if err := json.Unmarshal(want, &h); err != nil {
		t.Fatalf("decode golden: %v", err)
	}
	if got := encodeGolden(t, h); !bytes.Equal(got, want) {
		t.Errorf("re-encoding the golden history is not byte-identical:\n got: %s\nwant: %s", got, want)
	}
	// The golden file is the encoding of the history constructed here. (It is
	// compacted first: a json.RawMessage tool return content keeps the
	// whitespace of an indented document.)
	var compact bytes.Buffer
	if err := json.Compact(&compact, want); err != nil {
		t.Fatal(err)
	}
	h = nil
	if err := json.Unmarshal(compact.Bytes(), &h); err != nil {
		t.Fatalf("decode compact golden: %v", err)
	}
	if !reflect.DeepEqual(h, goldenHistory()) {
		t.Errorf("decoded golden history differs from the constructed one:\n got: %#v\nwant: %#v", h, goldenHistory())
	}
	// The golden form pins a few details a reader relies on.
	for _, s := range []string{
		`"version": 2`,
		`"part_kind": "tool-call"`,
		`"part_kind": "thinking"`,
		`"provider_extra": "{\"google\":{\"thought_signature\":\"c2ln\"}}"`,
		`"args": "{\"q\": \"unterminated"`,
		`"data_base64": "aGVsbG8Ad29ybGQ="`,
		`"timestamp": "2025-03-14T15:09:27.123456789Z"`,
		`"outcome": "cancelled"`,
	} {
		if !bytes.Contains(want, []byte(s)) {
			t.Errorf("golden file does not contain %s", s)
		}
	}
}

// TestGoldenV1StillReadable reads a history written by version 1 of the
// form (before thinking parts): it decodes to the same messages, without the
// parts and fields version 2 added.
func TestGoldenV1StillReadable(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile(filepath.Join("testdata", goldenV1))
	if err != nil {
		t.Fatal(err)
	}
	var compact bytes.Buffer
	if err := json.Compact(&compact, raw); err != nil {
		t.Fatal(err)
	}
	var h message.History
	if err := json.Unmarshal(compact.Bytes(), &h); err != nil {
		t.Fatalf("decode v1 history: %v", err)
	}
	want := goldenHistory()
	for i := range want {
		want[i].Parts = slices.DeleteFunc(slices.Clone(want[i].Parts), func(p message.Part) bool {
			_, ok := p.(message.Thinking)
			return ok
		})
		for j, p := range want[i].Parts {
			if c, ok := p.(message.ToolCall); ok {
				c.ProviderExtra = ""
				want[i].Parts[j] = c
			}
		}
	}
	if !reflect.DeepEqual(h, want) {
		t.Errorf("v1 history decoded as:\n got: %#v\nwant: %#v", h, want)
	}
	// Written again, it takes the current version.
	b, err := json.Marshal(h)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(b, []byte(`{"version":2,`)) {
		t.Errorf("re-encoded v1 history: %.40s", b)
	}
}

func TestThinkingIsNotText(t *testing.T) {
	t.Parallel()
	m := message.NewResponse(message.Thinking{Content: "hmm "}, message.Text{Content: "answer"})
	if got := m.Text(); got != "answer" {
		t.Errorf("Text() = %q, want only the answer", got)
	}
	if got := m.Thinking(); got != "hmm " {
		t.Errorf("Thinking() = %q", got)
	}
}

func TestGoldenPartOrder(t *testing.T) {
	t.Parallel()
	// part_kind comes first in every part, so a reader can dispatch on it.
	b, err := json.Marshal(goldenHistory())
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Messages []struct {
			Parts []json.RawMessage `json:"parts"`
		} `json:"messages"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, m := range doc.Messages {
		for _, p := range m.Parts {
			if !bytes.HasPrefix(p, []byte(`{"part_kind":"`)) {
				t.Errorf("part does not start with part_kind: %s", p)
			}
			n++
		}
	}
	if n != 18 {
		t.Errorf("got %d parts, want 18", n)
	}
}

func TestRoundTrip(t *testing.T) {
	t.Parallel()
	h := goldenHistory()
	b, err := json.Marshal(h)
	if err != nil {
		t.Fatal(err)
	}
	var got message.History
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, h) {
		t.Errorf("round trip differs:\n got: %#v\nwant: %#v", got, h)
	}

	// A single message has the same form as inside a history.
	m := h[1]
	mb, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(b, mb) {
		t.Errorf("message form %s is not the one used in the history", mb)
	}
	var gm message.Message
	if err := json.Unmarshal(mb, &gm); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(gm, m) {
		t.Errorf("message round trip differs:\n got: %#v\nwant: %#v", gm, m)
	}
}

func TestRoundTripEdgeCases(t *testing.T) {
	t.Parallel()
	ts := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	h := message.History{
		// A request without IDs, metadata or parts.
		{Role: message.RoleRequest, Parts: []message.Part{}, Timestamp: ts},
		// Pointer parts encode like values.
		{Role: message.RoleResponse, Parts: []message.Part{&message.Text{Content: "hi"}}, Timestamp: ts},
		// A tool return without content decodes with null content.
		{Role: message.RoleRequest, Parts: []message.Part{message.ToolReturn{ToolName: "t", ToolCallID: "c"}}, Timestamp: ts},
	}
	b, err := json.Marshal(h)
	if err != nil {
		t.Fatal(err)
	}
	var got message.History
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 || len(got[0].Parts) != 0 || got[0].Usage != (message.Usage{}) || got[0].Metadata != nil {
		t.Errorf("empty request: %#v", got[0])
	}
	if p, ok := got[1].Parts[0].(message.Text); !ok || p.Content != "hi" {
		t.Errorf("pointer part decoded as %#v", got[1].Parts[0])
	}
	if p := got[2].Parts[0].(message.ToolReturn); string(p.Content) != "null" || p.ModelText() != "" {
		t.Errorf("return without content decoded as %#v", p)
	}

	// An empty history is an empty list of messages.
	b, err = json.Marshal(message.History{})
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != `{"version":2,"messages":[]}` {
		t.Errorf("empty history: %s", b)
	}
	b, err = json.Marshal(message.History(nil))
	if err != nil || string(b) != `{"version":2,"messages":[]}` {
		t.Errorf("nil history: %s, %v", b, err)
	}

	// A nil part cannot be encoded.
	_, err = json.Marshal(message.History{{Role: message.RoleRequest, Parts: []message.Part{nil}}})
	if err == nil || !strings.Contains(err.Error(), "nil part") {
		t.Errorf("nil part: %v", err)
	}
}

func TestUnknownFieldsIgnored(t *testing.T) {
	t.Parallel()
	doc := `{
	  "version": 1,
	  "written_by": "offload v9",
	  "messages": [{
	    "role": "response",
	    "run_id": "r1",
	    "timestamp": "2025-01-02T03:04:05Z",
	    "future_field": {"x": [1, 2]},
	    "usage": {"input_tokens": 3, "cache_tokens": 99},
	    "parts": [
	      {"part_kind": "text", "content": "hi", "id": "p1", "provider_details": null},
	      {"part_kind": "tool-call", "tool_name": "t", "tool_call_id": "c", "args": "{}", "provider_name": "x"}
	    ]
	  }]
	}`
	var h message.History
	if err := json.Unmarshal([]byte(doc), &h); err != nil {
		t.Fatalf("unknown fields must be ignored: %v", err)
	}
	want := message.History{{
		Role:      message.RoleResponse,
		RunID:     "r1",
		Timestamp: time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC),
		Usage:     message.Usage{InputTokens: 3},
		Parts: []message.Part{
			message.Text{Content: "hi"},
			message.ToolCall{ToolName: "t", ToolCallID: "c", Args: "{}"},
		},
	}}
	if !reflect.DeepEqual(h, want) {
		t.Errorf("got %#v\nwant %#v", h, want)
	}
}

func TestDecodeErrors(t *testing.T) {
	t.Parallel()
	msg := func(role, part string) string {
		return `{"version":1,"messages":[{"role":"` + role + `","timestamp":"2025-01-02T03:04:05Z","parts":[{"part_kind":"text","content":"a"},` + part + `]}]}`
	}
	tests := []struct {
		name, doc string
		want      []string // substrings of the error
	}{
		{"unknown part kind", msg("response", `{"part_kind":"hologram","content":"hmm"}`),
			[]string{"message: decode history", "message 0", "part 1", `unknown part_kind "hologram"`}},
		{"missing part kind", msg("response", `{"content":"hmm"}`),
			[]string{"message 0", "part 1", `unknown part_kind ""`}},
		{"unknown role", msg("assistant", `{"part_kind":"text","content":"b"}`),
			[]string{"message: decode history", "message 0", `unknown role "assistant"`}},
		{"part of the wrong shape", msg("response", `{"part_kind":"tool-call","args":{"a":1}}`),
			[]string{"message 0", "part 1", "cannot unmarshal"}},
		{"part not an object", msg("response", `"text"`),
			[]string{"message 0", "part 1"}},
		{"not JSON", `{"version":1,`, []string{"unexpected end of JSON input"}},
		{"messages not a list", `{"version":1,"messages":{}}`, []string{"message: decode history"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var h message.History
			err := json.Unmarshal([]byte(tt.doc), &h)
			if err == nil {
				t.Fatalf("decoded %#v, want an error", h)
			}
			for _, s := range tt.want {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not contain %q", err, s)
				}
			}
			if errors.Is(err, message.ErrUnsupportedVersion) {
				t.Errorf("error %q must not be ErrUnsupportedVersion", err)
			}
		})
	}

	// A single message refuses an unknown role too.
	var m message.Message
	if err := json.Unmarshal([]byte(`{"role":"tool","parts":[]}`), &m); err == nil || !strings.Contains(err.Error(), `unknown role "tool"`) {
		t.Errorf("message with unknown role: %v", err)
	}
}

func TestUnsupportedVersion(t *testing.T) {
	t.Parallel()
	for _, doc := range []string{
		`{"version":3,"messages":[]}`,
		`{"version":3,"messages":[{"role":"future","parts":[{"part_kind":"hologram"}]}]}`,
		`{"version":0,"messages":[]}`,
		`{"messages":[]}`,
	} {
		var h message.History
		err := json.Unmarshal([]byte(doc), &h)
		if !errors.Is(err, message.ErrUnsupportedVersion) {
			t.Errorf("%s: got %v, want ErrUnsupportedVersion", doc, err)
		}
		if h != nil {
			t.Errorf("%s: history set to %#v on error", doc, h)
		}
	}
	var h message.History
	err := json.Unmarshal([]byte(`{"version":3,"messages":[]}`), &h)
	if err == nil || !strings.Contains(err.Error(), "3 (this build reads 1 to 2)") {
		t.Errorf("error should name both versions: %v", err)
	}
}

func TestToolReturnModelText(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		content string
		outcome message.Outcome
		want    string
	}{
		{"string", `"hello"`, message.OutcomeSuccess, "hello"},
		{"string with escapes", `"a\n\"b\" \u00e9"`, "", "a\n\"b\" é"},
		{"null", `null`, message.OutcomeSuccess, ""},
		{"empty", ``, "", ""},
		{"number", `42`, "", "42"},
		{"bool", `true`, "", "true"},
		{"object compact", "{\n  \"a\": 1,\n  \"b\": [1, 2]\n}", "", `{"a":1,"b":[1,2]}`},
		{"array", `[1, 2]`, "", `[1,2]`},
		{"object with html", `{"q": "<a&b>"}`, "", `{"q":"<a&b>"}`},
		{"denied is plain", `"The tool call was denied."`, message.OutcomeDenied, "The tool call was denied."},
		{"cancelled is plain", `"The tool call was cancelled."`, message.OutcomeCancelled, message.CancelledText},
		{"failed string", `"disk full"`, message.OutcomeFailed, `{"error":"disk full"}`},
		{"failed error type", `"PathError"`, message.OutcomeFailed, `{"error":"PathError"}`},
		{"failed object", `{"code": 7}`, message.OutcomeFailed, `{"error":"{\"code\":7}"}`},
		{"failed null", `null`, message.OutcomeFailed, `{"error":""}`},
		{"failed html not escaped", `"a <b> && c"`, message.OutcomeFailed, `{"error":"a <b> && c"}`},
		{"failed quotes", `"bad \"x\""`, message.OutcomeFailed, `{"error":"bad \"x\""}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := message.ToolReturn{ToolName: "t", ToolCallID: "c", Content: json.RawMessage(tt.content), Outcome: tt.outcome}
			if got := r.ModelText(); got != tt.want {
				t.Errorf("ModelText() = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestContentText(t *testing.T) {
	t.Parallel()
	tests := []struct{ in, want string }{
		{`"x"`, "x"},
		{`  "padded"  `, "padded"},
		{`""`, ""},
		{`null`, ""},
		{` null `, ""},
		{``, ""},
		{`1.50`, "1.50"},
		{`{"b": 2, "a": 1}`, `{"b":2,"a":1}`}, // key order kept
		{`[ "a" , null ]`, `["a",null]`},
		{`not json`, "not json"}, // invalid JSON is shown as is
		{`"unterminated`, `"unterminated`},
	}
	for _, tt := range tests {
		if got := message.ContentText(json.RawMessage(tt.in)); got != tt.want {
			t.Errorf("ContentText(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestRetryPromptModelText(t *testing.T) {
	t.Parallel()
	r := message.RetryPrompt{ToolName: "t", ToolCallID: "c", Content: "x must be positive"}
	if got, want := r.ModelText(), "x must be positive\n\nFix the errors and try again."; got != want {
		t.Errorf("ModelText() = %q, want %q", got, want)
	}
	if message.RetrySuffix != "\n\nFix the errors and try again." {
		t.Errorf("RetrySuffix = %q", message.RetrySuffix)
	}
}

func TestPartKinds(t *testing.T) {
	t.Parallel()
	parts := map[message.Part]string{
		message.SystemPrompt{}: "system-prompt",
		message.Text{}:         "text",
		message.ToolCall{}:     "tool-call",
		message.Thinking{}:     "thinking",
		message.RetryPrompt{}:  "retry-prompt",
	}
	for p, want := range parts {
		if got := p.PartKind(); got != want {
			t.Errorf("%T.PartKind() = %q, want %q", p, got, want)
		}
	}
	if got := (message.UserPrompt{}).PartKind(); got != "user-prompt" {
		t.Errorf("UserPrompt kind %q", got)
	}
	if got := (message.ToolReturn{}).PartKind(); got != "tool-return" {
		t.Errorf("ToolReturn kind %q", got)
	}
}

func TestHelpers(t *testing.T) {
	t.Parallel()
	m := message.NewResponse(
		message.Text{Content: "a"},
		message.ToolCall{ToolName: "x", ToolCallID: "1"},
		message.Text{Content: "b"},
		message.ToolCall{ToolName: "y", ToolCallID: "2"},
	)
	if m.Role != message.RoleResponse || m.Timestamp.IsZero() || m.Timestamp.Location() != time.UTC {
		t.Errorf("NewResponse: %#v", m)
	}
	if m.Text() != "ab" {
		t.Errorf("Text() = %q", m.Text())
	}
	if calls := m.ToolCalls(); len(calls) != 2 || calls[0].ToolName != "x" || calls[1].ToolName != "y" {
		t.Errorf("ToolCalls() = %#v", calls)
	}
	r := message.NewRequest(message.UserText("hi"))
	if r.Role != message.RoleRequest || r.ToolCalls() != nil || r.Text() != "" {
		t.Errorf("NewRequest: %#v", r)
	}
	if up := r.Parts[0].(message.UserPrompt); !reflect.DeepEqual(up.Content, []message.Content{message.TextContent("hi")}) {
		t.Errorf("UserText: %#v", up)
	}

	if got := (message.ToolCall{Args: "  "}).ArgsJSON(); string(got) != "{}" {
		t.Errorf("ArgsJSON of blank args = %s", got)
	}
	if got := (message.ToolCall{Args: `{"a":1}`}).ArgsJSON(); string(got) != `{"a":1}` {
		t.Errorf("ArgsJSON = %s", got)
	}

	u := message.Usage{Requests: 1, ToolCalls: 2, InputTokens: 3, OutputTokens: 4}
	if s := u.Add(u); s != (message.Usage{Requests: 2, ToolCalls: 4, InputTokens: 6, OutputTokens: 8}) || s.TotalTokens() != 14 {
		t.Errorf("Add/TotalTokens: %#v", s)
	}
}
