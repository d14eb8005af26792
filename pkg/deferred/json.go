package deferred

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/offload-dev/offload/pkg/message"
	"github.com/offload-dev/offload/pkg/tool"
)

// The JSON form follows Pydantic AI's (reference §1.4):
//
//	approvals: true | false | {"override_args": {...}|null, "kind": "tool-approved"}
//	           | {"message": "...", "kind": "tool-denied"}
//	calls:     {"return_value": ..., "content": ..., "metadata": ..., "kind": "tool-return"}
//	           | {"message": "...", "kind": "tool-failed"} | {"message": "...", "kind": "model-retry"}
//	           | {"part_kind": "retry-prompt", ...} | any other JSON value (the return value)

type resultsJSON struct {
	Calls     map[string]json.RawMessage `json:"calls"`
	Approvals map[string]json.RawMessage `json:"approvals"`
	Metadata  map[string]map[string]any  `json:"metadata"`
}

// MarshalJSON implements json.Marshaler.
func (r Results) MarshalJSON() ([]byte, error) {
	out := resultsJSON{
		Calls:     map[string]json.RawMessage{},
		Approvals: map[string]json.RawMessage{},
		Metadata:  r.Metadata,
	}
	if out.Metadata == nil {
		out.Metadata = map[string]map[string]any{}
	}
	for id, v := range r.Approvals {
		raw, err := MarshalApproval(v)
		if err != nil {
			return nil, fmt.Errorf("approval %q: %w", id, err)
		}
		out.Approvals[id] = raw
	}
	for id, v := range r.Calls {
		raw, err := MarshalCallResult(v)
		if err != nil {
			return nil, fmt.Errorf("call %q: %w", id, err)
		}
		out.Calls[id] = raw
	}
	return json.Marshal(out)
}

// UnmarshalJSON implements json.Unmarshaler. Approval values other than the
// four allowed forms are refused with ErrInvalidApproval.
func (r *Results) UnmarshalJSON(data []byte) error {
	var in resultsJSON
	if err := json.Unmarshal(data, &in); err != nil {
		return fmt.Errorf("deferred: decode results: %w", err)
	}
	out := Results{Calls: map[string]any{}, Approvals: map[string]any{}, Metadata: in.Metadata}
	if out.Metadata == nil {
		out.Metadata = map[string]map[string]any{}
	}
	for id, raw := range in.Approvals {
		v, err := UnmarshalApproval(raw)
		if err != nil {
			return fmt.Errorf("deferred: decode results: approval %q: %w", id, err)
		}
		out.Approvals[id] = v
	}
	for id, raw := range in.Calls {
		v, err := UnmarshalCallResult(raw)
		if err != nil {
			return fmt.Errorf("deferred: decode results: call %q: %w", id, err)
		}
		out.Calls[id] = v
	}
	*r = out
	return nil
}

// MarshalApproval encodes an approval value in its JSON form.
func MarshalApproval(v any) (json.RawMessage, error) {
	if b, ok := v.(bool); ok {
		return json.Marshal(b)
	}
	n, err := NormalizeApproval(v)
	if err != nil {
		return nil, err
	}
	switch a := n.(type) {
	case ToolApproved:
		override := a.OverrideArgs
		if len(override) == 0 {
			override = json.RawMessage("null")
		}
		return json.Marshal(struct {
			OverrideArgs json.RawMessage `json:"override_args"`
			Kind         string          `json:"kind"`
		}{override, "tool-approved"})
	default:
		d := n.(ToolDenied)
		return json.Marshal(struct {
			Message string `json:"message"`
			Kind    string `json:"kind"`
			Reason  string `json:"reason,omitempty"`
		}{d.Text(), "tool-denied", d.Reason})
	}
}

// UnmarshalApproval decodes an approval value: a bool, a ToolApproved or a
// ToolDenied. Anything else wraps ErrInvalidApproval.
func UnmarshalApproval(raw json.RawMessage) (any, error) {
	raw = bytes.TrimSpace(raw)
	switch string(raw) {
	case "true":
		return true, nil
	case "false":
		return false, nil
	}
	var obj struct {
		Kind         string          `json:"kind"`
		OverrideArgs json.RawMessage `json:"override_args"`
		Message      *string         `json:"message"`
		Reason       string          `json:"reason"`
	}
	if len(raw) == 0 || raw[0] != '{' || json.Unmarshal(raw, &obj) != nil {
		return nil, fmt.Errorf("%w: %s", ErrInvalidApproval, truncate(raw))
	}
	switch obj.Kind {
	case "tool-approved":
		a := ToolApproved{}
		if o := bytes.TrimSpace(obj.OverrideArgs); len(o) > 0 && !bytes.Equal(o, []byte("null")) {
			if o[0] != '{' {
				return nil, fmt.Errorf("%w: override_args must be a JSON object", ErrInvalidApproval)
			}
			a.OverrideArgs = json.RawMessage(o)
		}
		return a, nil
	case "tool-denied":
		d := ToolDenied{Reason: obj.Reason}
		if obj.Message != nil {
			d.Message = *obj.Message
		}
		return d, nil
	}
	return nil, fmt.Errorf("%w: %s", ErrInvalidApproval, truncate(raw))
}

type toolReturnJSON struct {
	ReturnValue json.RawMessage   `json:"return_value"`
	Content     []message.Content `json:"content,omitempty"`
	Metadata    map[string]any    `json:"metadata,omitempty"`
	Kind        string            `json:"kind"`
}

type messageJSON struct {
	Message string `json:"message"`
	Kind    string `json:"kind"`
}

// MarshalCallResult encodes an external call result in its JSON form.
func MarshalCallResult(v any) (json.RawMessage, error) {
	switch x := v.(type) {
	case tool.Return:
		return marshalReturn(x)
	case *tool.Return:
		return marshalReturn(*x)
	case *tool.ModelRetry:
		return json.Marshal(messageJSON{x.Message, "model-retry"})
	case *tool.ToolFailed:
		return json.Marshal(messageJSON{x.Message, "tool-failed"})
	case message.RetryPrompt:
		return json.Marshal(struct {
			PartKind   string `json:"part_kind"`
			ToolName   string `json:"tool_name"`
			ToolCallID string `json:"tool_call_id"`
			Content    string `json:"content"`
		}{"retry-prompt", x.ToolName, x.ToolCallID, x.Content})
	case json.RawMessage:
		if !json.Valid(x) {
			return nil, fmt.Errorf("deferred: call result is not valid JSON")
		}
		return x, nil
	default:
		return json.Marshal(v)
	}
}

func marshalReturn(r tool.Return) (json.RawMessage, error) {
	val, err := json.Marshal(r.Value)
	if err != nil {
		return nil, err
	}
	if raw, ok := r.Value.(json.RawMessage); ok {
		val = raw
	}
	return json.Marshal(toolReturnJSON{ReturnValue: val, Content: r.Content, Metadata: r.Metadata, Kind: "tool-return"})
}

// UnmarshalCallResult decodes an external call result: a tool.Return (with
// Value as json.RawMessage), *tool.ModelRetry, *tool.ToolFailed,
// message.RetryPrompt, or the raw JSON value as json.RawMessage.
func UnmarshalCallResult(raw json.RawMessage) (any, error) {
	raw = bytes.TrimSpace(raw)
	if !json.Valid(raw) {
		return nil, fmt.Errorf("deferred: call result is not valid JSON")
	}
	if len(raw) > 0 && raw[0] == '{' {
		var head struct {
			Kind     string `json:"kind"`
			PartKind string `json:"part_kind"`
		}
		_ = json.Unmarshal(raw, &head)
		switch {
		case head.Kind == "tool-return":
			var tr struct {
				ReturnValue json.RawMessage `json:"return_value"`
				Content     json.RawMessage `json:"content"`
				Metadata    map[string]any  `json:"metadata"`
			}
			if err := json.Unmarshal(raw, &tr); err != nil {
				return nil, err
			}
			content, err := DecodeContent(tr.Content)
			if err != nil {
				return nil, err
			}
			val := tr.ReturnValue
			if len(val) == 0 {
				val = json.RawMessage("null")
			}
			return tool.Return{Value: val, Content: content, Metadata: tr.Metadata}, nil
		case head.Kind == "model-retry":
			var m messageJSON
			_ = json.Unmarshal(raw, &m)
			return &tool.ModelRetry{Message: m.Message}, nil
		case head.Kind == "tool-failed":
			var m messageJSON
			_ = json.Unmarshal(raw, &m)
			return &tool.ToolFailed{Message: m.Message}, nil
		case head.PartKind == "retry-prompt":
			var p message.RetryPrompt
			if err := json.Unmarshal(raw, &p); err != nil {
				return nil, err
			}
			return p, nil
		}
	}
	return raw, nil
}

// DecodeContent decodes extra user content given as a string, a list of
// strings and content items, or null.
func DecodeContent(raw json.RawMessage) ([]message.Content, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return []message.Content{message.TextContent(s)}, nil
	}
	var items []json.RawMessage
	if err := json.Unmarshal(raw, &items); err != nil {
		return nil, fmt.Errorf("deferred: content must be a string or a list: %w", err)
	}
	out := make([]message.Content, 0, len(items))
	for _, it := range items {
		if json.Unmarshal(it, &s) == nil {
			out = append(out, message.TextContent(s))
			continue
		}
		var c message.Content
		if err := json.Unmarshal(it, &c); err != nil {
			return nil, err
		}
		if c.Type != "text" && c.Type != "file" {
			return nil, fmt.Errorf("deferred: content item type %q is not text or file", c.Type)
		}
		out = append(out, c)
	}
	return out, nil
}

func truncate(b []byte) string {
	if len(b) > 80 {
		return string(b[:80]) + "…"
	}
	return string(b)
}
