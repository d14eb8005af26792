package message

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// Role says whether a [Message] was sent to the model or received from it.
type Role string

const (
	// RoleRequest marks a message sent to the model.
	RoleRequest Role = "request"
	// RoleResponse marks a message received from the model.
	RoleResponse Role = "response"
)

// Message is one entry of the history.
type Message struct {
	// Role is RoleRequest or RoleResponse.
	Role Role
	// Parts are the message's parts, in order.
	Parts []Part
	// RunID is the ID of the run that produced the message.
	RunID string
	// ConversationID is the ID of the conversation the message belongs to.
	ConversationID string
	// Timestamp is when the message was created.
	Timestamp time.Time
	// ModelName is the model that produced a response; empty on requests.
	ModelName string
	// FinishReason is the provider's finish reason for a response, if any.
	FinishReason string
	// Usage is the token usage of a response; zero on requests.
	Usage Usage
	// Metadata is application-only data (never sent to the model), e.g. who
	// approved a call.
	Metadata map[string]any
}

// NewRequest returns a request message with the given parts.
func NewRequest(parts ...Part) Message {
	return Message{Role: RoleRequest, Parts: parts, Timestamp: time.Now().UTC()}
}

// NewResponse returns a response message with the given parts.
func NewResponse(parts ...Part) Message {
	return Message{Role: RoleResponse, Parts: parts, Timestamp: time.Now().UTC()}
}

// ToolCalls returns the tool call parts of the message, in order.
func (m Message) ToolCalls() []ToolCall {
	var calls []ToolCall
	for _, p := range m.Parts {
		if c, ok := p.(ToolCall); ok {
			calls = append(calls, c)
		}
	}
	return calls
}

// Text returns the concatenated text parts of the message.
func (m Message) Text() string {
	var s string
	for _, p := range m.Parts {
		if t, ok := p.(Text); ok {
			s += t.Content
		}
	}
	return s
}

// Usage counts what a run or a single response consumed.
type Usage struct {
	// Requests is the number of model requests made.
	Requests int `json:"requests,omitempty"`
	// ToolCalls is the number of successful tool calls executed.
	ToolCalls int `json:"tool_calls,omitempty"`
	// InputTokens is the number of prompt tokens.
	InputTokens int `json:"input_tokens,omitempty"`
	// OutputTokens is the number of completion tokens.
	OutputTokens int `json:"output_tokens,omitempty"`
}

// Add returns the sum of u and o.
func (u Usage) Add(o Usage) Usage {
	return Usage{
		Requests:     u.Requests + o.Requests,
		ToolCalls:    u.ToolCalls + o.ToolCalls,
		InputTokens:  u.InputTokens + o.InputTokens,
		OutputTokens: u.OutputTokens + o.OutputTokens,
	}
}

// TotalTokens returns InputTokens + OutputTokens.
func (u Usage) TotalTokens() int { return u.InputTokens + u.OutputTokens }

// Version is the version of the history JSON form written by this package.
//
// Version 2 added the "thinking" part and the tool call's "provider_extra";
// version 1 histories (without them) are read as they are.
const Version = 2

// MinVersion is the oldest history version this package reads.
const MinVersion = 1

// ErrUnsupportedVersion is returned when decoding a history whose version is
// newer than [Version] or older than [MinVersion].
var ErrUnsupportedVersion = errors.New("message: unsupported history version")

// History is a sequence of messages with a stable, versioned JSON form.
type History []Message

type historyJSON struct {
	Version  int           `json:"version"`
	Messages []messageJSON `json:"messages"`
}

type messageJSON struct {
	Role           Role              `json:"role"`
	RunID          string            `json:"run_id,omitempty"`
	ConversationID string            `json:"conversation_id,omitempty"`
	Timestamp      time.Time         `json:"timestamp"`
	ModelName      string            `json:"model_name,omitempty"`
	FinishReason   string            `json:"finish_reason,omitempty"`
	Usage          *Usage            `json:"usage,omitempty"`
	Metadata       map[string]any    `json:"metadata,omitempty"`
	Parts          []json.RawMessage `json:"parts"`
}

// MarshalJSON encodes the history in its versioned form.
func (h History) MarshalJSON() ([]byte, error) {
	out := historyJSON{Version: Version, Messages: make([]messageJSON, 0, len(h))}
	for i, m := range h {
		mj, err := m.toJSON()
		if err != nil {
			return nil, fmt.Errorf("message %d: %w", i, err)
		}
		out.Messages = append(out.Messages, mj)
	}
	return json.Marshal(out)
}

// UnmarshalJSON decodes a history written by [History.MarshalJSON].
func (h *History) UnmarshalJSON(data []byte) error {
	var in historyJSON
	if err := json.Unmarshal(data, &in); err != nil {
		return fmt.Errorf("message: decode history: %w", err)
	}
	if in.Version < MinVersion || in.Version > Version {
		return fmt.Errorf("%w: %d (this build reads %d to %d)", ErrUnsupportedVersion, in.Version, MinVersion, Version)
	}
	out := make(History, 0, len(in.Messages))
	for i, mj := range in.Messages {
		m, err := mj.toMessage()
		if err != nil {
			return fmt.Errorf("message: decode history: message %d: %w", i, err)
		}
		out = append(out, m)
	}
	*h = out
	return nil
}

// MarshalJSON encodes a single message in the form used inside a history.
func (m Message) MarshalJSON() ([]byte, error) {
	mj, err := m.toJSON()
	if err != nil {
		return nil, err
	}
	return json.Marshal(mj)
}

// UnmarshalJSON decodes a single message.
func (m *Message) UnmarshalJSON(data []byte) error {
	var mj messageJSON
	if err := json.Unmarshal(data, &mj); err != nil {
		return err
	}
	out, err := mj.toMessage()
	if err != nil {
		return err
	}
	*m = out
	return nil
}

func (m Message) toJSON() (messageJSON, error) {
	mj := messageJSON{
		Role:           m.Role,
		RunID:          m.RunID,
		ConversationID: m.ConversationID,
		Timestamp:      m.Timestamp,
		ModelName:      m.ModelName,
		FinishReason:   m.FinishReason,
		Metadata:       m.Metadata,
		Parts:          make([]json.RawMessage, 0, len(m.Parts)),
	}
	if m.Usage != (Usage{}) {
		u := m.Usage
		mj.Usage = &u
	}
	for i, p := range m.Parts {
		raw, err := marshalPart(p)
		if err != nil {
			return mj, fmt.Errorf("part %d: %w", i, err)
		}
		mj.Parts = append(mj.Parts, raw)
	}
	return mj, nil
}

func (mj messageJSON) toMessage() (Message, error) {
	if mj.Role != RoleRequest && mj.Role != RoleResponse {
		return Message{}, fmt.Errorf("unknown role %q", mj.Role)
	}
	m := Message{
		Role:           mj.Role,
		RunID:          mj.RunID,
		ConversationID: mj.ConversationID,
		Timestamp:      mj.Timestamp,
		ModelName:      mj.ModelName,
		FinishReason:   mj.FinishReason,
		Metadata:       mj.Metadata,
		Parts:          make([]Part, 0, len(mj.Parts)),
	}
	if mj.Usage != nil {
		m.Usage = *mj.Usage
	}
	for i, raw := range mj.Parts {
		p, err := unmarshalPart(raw)
		if err != nil {
			return Message{}, fmt.Errorf("part %d: %w", i, err)
		}
		m.Parts = append(m.Parts, p)
	}
	return m, nil
}
