// Package llm defines the small interface between the agent and a language
// model: a [Request] (history, tool definitions, settings) goes in, a
// [Response] (text and tool calls, usage) comes out, optionally streamed as
// [Delta]s.
//
// Implementations: package openaicompat (any OpenAI-compatible endpoint
// through go-openai), package testmodel (deterministic, schema-driven) and
// package script (turns from a Go function or a YAML/JSON file).
package llm

import (
	"context"
	"encoding/json"
	"errors"

	"github.com/offload-dev/offload/pkg/message"
)

// Model is a language model.
type Model interface {
	// Name returns the model's name, as recorded in responses and metrics.
	Name() string
	// Generate returns the model's response to req.
	Generate(ctx context.Context, req *Request) (*Response, error)
	// Stream is Generate delivering the response incrementally: onDelta is
	// called for each fragment, in order, from the calling goroutine, before
	// Stream returns the assembled response.
	Stream(ctx context.Context, req *Request, onDelta func(Delta)) (*Response, error)
}

// ToolDef is a tool as offered to the model.
type ToolDef struct {
	Name        string
	Description string
	// Parameters is the JSON Schema of the arguments (an object schema).
	Parameters json.RawMessage
}

// Settings are optional request settings. Zero values mean "provider default".
type Settings struct {
	// Temperature, when non-nil, is sent as is.
	Temperature *float64
	// MaxTokens caps the completion, when > 0.
	MaxTokens int
	// ToolChoice is "", "auto", "none", "required" or a tool name.
	ToolChoice string
	// ParallelToolCalls, when non-nil, enables or disables parallel calls.
	ParallelToolCalls *bool
}

// Request is what the agent sends to the model.
type Request struct {
	// Messages is the history, oldest first.
	Messages []message.Message
	// Tools are the tools the model may call.
	Tools []ToolDef
	// Settings are optional knobs.
	Settings Settings
	// OnRetry, when non-nil, is called from the calling goroutine each time
	// the model gives up on an attempt and starts the request again (a 429
	// or 5xx answer, a stream cut or silent for the idle timeout). Deltas
	// delivered before the call belong to the failed attempt and are void.
	OnRetry func(Retry)
}

// Retry describes a new attempt at a model request.
type Retry struct {
	// Attempt is the number of the attempt starting, 2 for the first retry.
	Attempt int
	// Reason says why the previous attempt failed, e.g. "status 503" or
	// "stream idle for 1m0s".
	Reason string
}

// Response is what the model returned.
type Response struct {
	// Parts are Thinking, Text and ToolCall parts, in the model's order.
	Parts []message.Part
	// Usage is the token usage of this request (Requests is not set).
	Usage message.Usage
	// ModelName is the model that answered, as reported by the provider.
	ModelName string
	// FinishReason is the provider's finish reason.
	FinishReason string
}

// Delta is a streamed fragment of a response.
type Delta struct {
	// Text is a fragment of text, if any.
	Text string
	// Thinking is a fragment of reasoning, if any; it is not output.
	Thinking string
	// ToolCallIndex and ToolCall describe a tool call fragment, if ToolCall
	// is non-nil: a new call carries its ID and name, later fragments carry
	// argument text only.
	ToolCallIndex int
	ToolCall      *message.ToolCall
}

// ErrIncomplete is returned when a streamed response ended before the
// provider said it was finished (connection cut, no finish reason).
var ErrIncomplete = errors.New("llm: incomplete response")

// ErrScriptExhausted is returned by scripted models that ran out of turns.
var ErrScriptExhausted = errors.New("llm: script exhausted")

// Deltas splits a response's parts into the deltas a streaming model would
// send: text word by word (each piece keeps the white space after it, so
// the pieces concatenate back to the text), tool calls whole, numbered in
// order. Test and scripted models stream with it.
func Deltas(parts []message.Part) []Delta {
	var out []Delta
	idx := 0
	for _, p := range parts {
		switch p := p.(type) {
		case message.Text:
			for _, w := range SplitWords(p.Content) {
				out = append(out, Delta{Text: w})
			}
		case message.ToolCall:
			out = append(out, Delta{ToolCallIndex: idx, ToolCall: &p})
			idx++
		}
	}
	return out
}

// SplitWords splits s after each run of white space that follows a word, so
// that the pieces concatenate back to s: "a b  c" → "a ", "b  ", "c";
// leading white space stays with the first word.
func SplitWords(s string) []string {
	var out []string
	start, word := 0, false
	for i := range len(s) {
		if i > 0 && word && isSpace(s[i-1]) && !isSpace(s[i]) {
			out = append(out, s[start:i])
			start = i
		}
		word = word || !isSpace(s[i])
	}
	if start < len(s) {
		out = append(out, s[start:])
	}
	return out
}

func isSpace(b byte) bool { return b == ' ' || b == '\t' || b == '\n' || b == '\r' }
