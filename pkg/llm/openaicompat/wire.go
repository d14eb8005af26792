package openaicompat

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
)

// The response side is decoded with the adapter's own types: go-openai's
// cannot carry what real providers send (arguments as an object, content as
// a list of parts, extra_content on tool calls, Ollama's reasoning, an error
// object next to the choices).

// wireChunk is a chat.completion.chunk, or a chat.completion body (whose
// choices carry a message instead of a delta).
type wireChunk struct {
	Model   string       `json:"model"`
	Choices []wireChoice `json:"choices"`
	Usage   *wireUsage   `json:"usage"`
	// Error is an in-band error (OpenRouter, proxies, OpenAI mid-stream).
	Error *wireError `json:"error"`
}

type wireChoice struct {
	Index        int         `json:"index"`
	Delta        wireMessage `json:"delta"`
	Message      wireMessage `json:"message"`
	FinishReason *string     `json:"finish_reason"`
	// Error is an error attached to the choice (some proxies).
	Error *wireError `json:"error"`
}

type wireMessage struct {
	Content          wireContent    `json:"content"`
	Refusal          *string        `json:"refusal"`
	ReasoningContent *string        `json:"reasoning_content"` // DeepSeek, vLLM, llama.cpp
	Reasoning        *string        `json:"reasoning"`         // Ollama, newer vLLM, OpenRouter
	ToolCalls        []wireToolCall `json:"tool_calls"`
}

type wireToolCall struct {
	Index    *int   `json:"index"`
	ID       string `json:"id"`
	Type     string `json:"type"`
	Function struct {
		Name      string   `json:"name"`
		Arguments wireArgs `json:"arguments"`
	} `json:"function"`
	// ExtraContent carries provider fields to echo back (Gemini's thought
	// signature: {"google":{"thought_signature":"..."}}).
	ExtraContent json.RawMessage `json:"extra_content"`
}

type wireUsage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
}

// wireError is a provider's error object. Code is a string (OpenAI), a
// number (OpenRouter) or null.
type wireError struct {
	Message string          `json:"message"`
	Type    string          `json:"type"`
	Code    json.RawMessage `json:"code"`
	Status  json.RawMessage `json:"status"` // Google: "INVALID_ARGUMENT"
}

func (e *wireError) code() string {
	for _, raw := range []json.RawMessage{e.Code, e.Status} {
		raw = bytes.TrimSpace(raw)
		if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
			continue
		}
		var s string
		if json.Unmarshal(raw, &s) == nil {
			if s != "" {
				return s
			}
			continue
		}
		var n json.Number
		if json.Unmarshal(raw, &n) == nil {
			return n.String()
		}
		return string(raw)
	}
	return ""
}

// wireContent is message content: a string, null, or a list of parts
// (Mistral's Magistral sends [{"type":"thinking","thinking":[...]},
// {"type":"text","text":"..."}]).
type wireContent struct {
	Text     string
	Thinking string
}

// UnmarshalJSON implements json.Unmarshaler.
func (c *wireContent) UnmarshalJSON(b []byte) error {
	*c = wireContent{}
	b = bytes.TrimSpace(b)
	switch {
	case len(b) == 0 || bytes.Equal(b, []byte("null")):
		return nil
	case b[0] == '"':
		return json.Unmarshal(b, &c.Text)
	case b[0] == '[':
		var parts []json.RawMessage
		if err := json.Unmarshal(b, &parts); err != nil {
			return err
		}
		for _, raw := range parts {
			if err := c.addPart(raw); err != nil {
				return err
			}
		}
		return nil
	case b[0] == '{':
		return c.addPart(b)
	default:
		return fmt.Errorf("content is neither a string nor a list of parts: %.40s", b)
	}
}

func (c *wireContent) addPart(raw json.RawMessage) error {
	var p struct {
		Type     string          `json:"type"`
		Text     string          `json:"text"`
		Thinking json.RawMessage `json:"thinking"`
	}
	if err := json.Unmarshal(raw, &p); err != nil {
		return fmt.Errorf("content part: %w", err)
	}
	switch p.Type {
	case "thinking", "reasoning":
		var nested wireContent
		if len(p.Thinking) > 0 {
			if err := nested.UnmarshalJSON(p.Thinking); err != nil {
				return err
			}
		}
		c.Thinking += nested.Text + nested.Thinking + p.Text
	default: // "text", "output_text" and unknown kinds carrying text
		c.Text += p.Text
	}
	return nil
}

// wireArgs is a tool call's arguments: a JSON-encoded string (OpenAI), or a
// JSON value (llama.cpp after its autoparser change), kept as its JSON text.
type wireArgs string

// UnmarshalJSON implements json.Unmarshaler.
func (a *wireArgs) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	switch {
	case len(b) == 0 || bytes.Equal(b, []byte("null")):
		*a = ""
	case b[0] == '"':
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		*a = wireArgs(s)
	default:
		var buf bytes.Buffer
		if err := json.Compact(&buf, b); err != nil {
			return err
		}
		*a = wireArgs(buf.String())
	}
	return nil
}

// complete reports whether s is a whole JSON value.
func complete(s string) bool {
	s = strings.TrimSpace(s)
	return s != "" && json.Valid([]byte(s))
}
