package message

import (
	"bytes"
	"encoding/json"
	"fmt"
	"unicode/utf8"
)

// Part is one piece of a [Message]. The concrete types are [SystemPrompt],
// [UserPrompt], [ToolReturn] and [RetryPrompt] (in requests) and [Text],
// [Thinking] and [ToolCall] (in responses).
type Part interface {
	// PartKind returns the JSON discriminator of the part, e.g. "tool-call".
	PartKind() string
}

// SystemPrompt is a system message.
type SystemPrompt struct {
	Content string `json:"content"`
}

// UserPrompt is a user message: text and files.
type UserPrompt struct {
	Content []Content `json:"content"`
}

// UserText returns a user prompt holding one text item.
func UserText(s string) UserPrompt { return UserPrompt{Content: []Content{TextContent(s)}} }

// Text is text produced by the model.
type Text struct {
	Content string `json:"content"`
}

// ToolCall is a call of a tool requested by the model.
type ToolCall struct {
	// ToolName is the name of the tool.
	ToolName string `json:"tool_name"`
	// ToolCallID is the model's ID of the call.
	ToolCallID string `json:"tool_call_id"`
	// Args are the arguments exactly as the model sent them: a JSON text,
	// possibly invalid.
	Args string `json:"args"`
	// ProviderExtra holds provider fields attached to the call that must be
	// sent back with it, as a JSON object text (e.g. Gemini's extra_content
	// with its thought signature). Empty for most providers.
	ProviderExtra string `json:"provider_extra,omitempty"`
}

// ArgsJSON returns the arguments as JSON, "{}" when they are empty. It does not
// check that they are valid.
func (c ToolCall) ArgsJSON() json.RawMessage {
	if len(bytes.TrimSpace([]byte(c.Args))) == 0 {
		return json.RawMessage("{}")
	}
	return json.RawMessage(c.Args)
}

// Outcome is how a tool call ended.
type Outcome string

const (
	// OutcomeSuccess is a normal return.
	OutcomeSuccess Outcome = "success"
	// OutcomeFailed is a terminal failure the model sees.
	OutcomeFailed Outcome = "failed"
	// OutcomeDenied is a call a person denied.
	OutcomeDenied Outcome = "denied"
	// OutcomeCancelled is a call left dangling by an interrupted or cancelled
	// run, answered with the synthetic text [CancelledText].
	OutcomeCancelled Outcome = "cancelled"
)

// CancelledText is the content of a synthetic return for a cancelled call.
const CancelledText = "The tool call was cancelled."

// ToolReturn is the result of a tool call.
type ToolReturn struct {
	// ToolName is the name of the tool.
	ToolName string `json:"tool_name"`
	// ToolCallID is the ID of the call this answers.
	ToolCallID string `json:"tool_call_id"`
	// Content is the return value as JSON.
	Content json.RawMessage `json:"content"`
	// Outcome says how the call ended; empty means OutcomeSuccess.
	Outcome Outcome `json:"outcome,omitempty"`
	// Metadata is application-only data, never sent to the model.
	Metadata map[string]any `json:"metadata,omitempty"`
}

// ModelText renders the content the way the model sees it: strings as they
// are, null as an empty string, other values as compact JSON, and failed
// returns as {"error":"<text>"}.
func (r ToolReturn) ModelText() string {
	s := ContentText(r.Content)
	if r.Outcome == OutcomeFailed {
		// Like Pydantic AI, do not escape <, > and & for HTML: the model
		// reads this text.
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		enc.SetEscapeHTML(false)
		_ = enc.Encode(map[string]string{"error": s})
		return string(bytes.TrimSuffix(buf.Bytes(), []byte("\n")))
	}
	return s
}

// ContentText renders a JSON value as text for the model: a JSON string as
// its contents, null or empty as "", anything else as compact JSON.
func ContentText(raw json.RawMessage) string {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return ""
	}
	if raw[0] == '"' {
		if s, ok := plainString(raw); ok {
			return s
		}
		var s string
		if json.Unmarshal(raw, &s) == nil {
			return s
		}
	}
	var buf bytes.Buffer
	if json.Compact(&buf, raw) == nil {
		return buf.String()
	}
	return string(raw)
}

// plainString returns the contents of a JSON string without escapes, in
// valid UTF-8, as json.Unmarshal would (a string that is not plain is left
// to it).
func plainString(raw json.RawMessage) (string, bool) {
	if len(raw) < 2 || raw[0] != '"' || raw[len(raw)-1] != '"' {
		return "", false
	}
	body := raw[1 : len(raw)-1]
	for _, c := range body {
		if c == '\\' || c == '"' || c < 0x20 {
			return "", false
		}
	}
	if !utf8.Valid(body) {
		return "", false
	}
	return string(body), true
}

// RetrySuffix ends every retry prompt sent to the model.
const RetrySuffix = "\n\nFix the errors and try again."

// RetryPrompt asks the model to call a tool again (or to fix its output).
type RetryPrompt struct {
	// ToolName is the tool concerned.
	ToolName string `json:"tool_name"`
	// ToolCallID is the call concerned.
	ToolCallID string `json:"tool_call_id"`
	// Content is the reason: a ModelRetry message or validation errors.
	Content string `json:"content"`
}

// ModelText returns the text sent to the model, ending with [RetrySuffix].
func (r RetryPrompt) ModelText() string { return r.Content + RetrySuffix }

// PartKind implements [Part].
func (SystemPrompt) PartKind() string { return "system-prompt" }

// PartKind implements [Part].
func (UserPrompt) PartKind() string { return "user-prompt" }

// PartKind implements [Part].
func (Text) PartKind() string { return "text" }

// PartKind implements [Part].
func (ToolCall) PartKind() string { return "tool-call" }

// PartKind implements [Part].
func (Thinking) PartKind() string { return "thinking" }

// PartKind implements [Part].
func (ToolReturn) PartKind() string { return "tool-return" }

// PartKind implements [Part].
func (RetryPrompt) PartKind() string { return "retry-prompt" }

// Content is an item of user content: text or a file.
type Content struct {
	// Type is "text" or "file".
	Type string `json:"type"`
	// Text is the text of a text item.
	Text string `json:"text,omitempty"`
	// Name is the file name of a file item.
	Name string `json:"name,omitempty"`
	// MediaType is the MIME type of a file item.
	MediaType string `json:"media_type,omitempty"`
	// Data is the content of a file item (base64 in JSON).
	Data []byte `json:"data_base64,omitempty"`
}

// TextContent returns a text item.
func TextContent(s string) Content { return Content{Type: "text", Text: s} }

// FileContent returns a file item.
func FileContent(name, mediaType string, data []byte) Content {
	return Content{Type: "file", Name: name, MediaType: mediaType, Data: data}
}

func marshalPart(p Part) (json.RawMessage, error) {
	if p == nil {
		return nil, fmt.Errorf("nil part")
	}
	body, err := json.Marshal(p)
	if err != nil {
		return nil, err
	}
	kind, _ := json.Marshal(p.PartKind())
	// Put the discriminator first: {"part_kind":"...", <fields>}.
	out := make([]byte, 0, len(body)+len(kind)+16)
	out = append(out, `{"part_kind":`...)
	out = append(out, kind...)
	if len(body) > 2 {
		out = append(out, ',')
		out = append(out, body[1:]...)
	} else {
		out = append(out, '}')
	}
	return out, nil
}

func unmarshalPart(raw json.RawMessage) (Part, error) {
	var head struct {
		Kind string `json:"part_kind"`
	}
	if err := json.Unmarshal(raw, &head); err != nil {
		return nil, err
	}
	switch head.Kind {
	case "system-prompt":
		return decodePart[SystemPrompt](raw)
	case "user-prompt":
		return decodePart[UserPrompt](raw)
	case "text":
		return decodePart[Text](raw)
	case "tool-call":
		return decodePart[ToolCall](raw)
	case "thinking":
		return decodePart[Thinking](raw)
	case "tool-return":
		p, err := decodePart[ToolReturn](raw)
		if err == nil && len(p.Content) == 0 {
			p.Content = json.RawMessage("null")
		}
		return p, err
	case "retry-prompt":
		return decodePart[RetryPrompt](raw)
	default:
		return nil, fmt.Errorf("unknown part_kind %q", head.Kind)
	}
}

func decodePart[T Part](raw json.RawMessage) (T, error) {
	var p T
	err := json.Unmarshal(raw, &p)
	return p, err
}
