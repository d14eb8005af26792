package script

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/offload-dev/offload/pkg/llm"
	"github.com/offload-dev/offload/pkg/message"
	"github.com/offload-dev/offload/pkg/tool"
)

// DefaultName is the name of a scripted [Model] created without one.
const DefaultName = "script"

// ErrInvalidScript is wrapped by the errors of [Parse] and [Load], and by the
// error [Model.Generate] returns for an invalid turn built with [FromTurns].
var ErrInvalidScript = errors.New("invalid script")

// ErrScriptedFailure is wrapped by the error [Model.Generate] returns for a
// turn with an Error: the simulated model failure.
var ErrScriptedFailure = errors.New("scripted model failure")

// Turn is one scripted model response: text, tool calls or both; or an
// error, which the model returns instead of a response.
type Turn struct {
	// Text is the response's text.
	Text string `json:"text,omitempty" yaml:"text,omitempty"`
	// ToolCalls are the response's tool calls, in order, after the text.
	ToolCalls []Call `json:"tool_calls,omitempty" yaml:"tool_calls,omitempty"`
	// Error, when set, makes the model fail with an error wrapping
	// [ErrScriptedFailure] and this message. A turn with an Error has no
	// Text and no ToolCalls.
	Error string `json:"error,omitempty" yaml:"error,omitempty"`
}

// Call is a scripted tool call.
type Call struct {
	// Tool is the tool's name; it must satisfy [tool.ValidateName].
	Tool string `json:"tool" yaml:"tool"`
	// ID is the call's ID. Defaults to call_<turn>_<i>, both counted from 1.
	ID string `json:"id,omitempty" yaml:"id,omitempty"`
	// Args are the arguments: a string is sent exactly as written (so a
	// script can send invalid JSON), nil as {}, anything else as its JSON
	// encoding.
	Args any `json:"args,omitempty" yaml:"args,omitempty"`
}

// Model is a model that answers the n-th request with the n-th turn of a
// script. It never cycles: once the turns are used up every request fails
// with an error wrapping [llm.ErrScriptExhausted]. It is safe for concurrent
// use; concurrent requests take turns in the order they acquire the model.
type Model struct {
	name  string
	turns []prepared

	mu       sync.Mutex
	requests int
}

var _ llm.Model = (*Model)(nil)

// prepared is a turn rendered once, at construction: its response, or the
// error to return.
type prepared struct {
	resp *llm.Response
	err  error
}

// FromTurns returns a model answering with turns, in order, one per request.
// An empty name defaults to [DefaultName]. Turns are validated as [Parse]
// validates them, but an invalid turn is reported only when it is reached:
// Generate then returns an error wrapping [ErrInvalidScript].
func FromTurns(name string, turns []Turn) *Model {
	if name == "" {
		name = DefaultName
	}
	m := &Model{name: name, turns: make([]prepared, len(turns))}
	for i, t := range turns {
		n := i + 1
		resp, err := render(n, t)
		switch {
		case err != nil:
			err = fmt.Errorf("script %q: %w: turn %d: %w", name, ErrInvalidScript, n, err)
		case t.Error != "":
			err = fmt.Errorf("script %q: turn %d: %w: %s", name, n, ErrScriptedFailure, t.Error)
		default:
			resp.ModelName = name
		}
		m.turns[i] = prepared{resp: resp, err: err}
	}
	return m
}

// Name returns the model's name.
func (m *Model) Name() string { return m.name }

// Len returns the number of turns in the script.
func (m *Model) Len() int { return len(m.turns) }

// Remaining returns the number of turns not used yet.
func (m *Model) Remaining() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return max(len(m.turns)-m.requests, 0)
}

// Generate returns the next turn's response. It returns ctx.Err() (without
// using a turn) when ctx is done, an error wrapping [ErrScriptedFailure] for
// a turn with an Error, an error wrapping [ErrInvalidScript] for an invalid
// turn, and an error wrapping [llm.ErrScriptExhausted] when the script has
// no turn left; the request itself is ignored.
func (m *Model) Generate(ctx context.Context, _ *llm.Request) (*llm.Response, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	m.mu.Lock()
	m.requests++
	n := m.requests
	m.mu.Unlock()
	if n > len(m.turns) {
		return nil, fmt.Errorf("script %q: request %d: %w (the script has %d turns)", m.name, n, llm.ErrScriptExhausted, len(m.turns))
	}
	p := m.turns[n-1]
	if p.err != nil {
		return nil, p.err
	}
	r := *p.resp
	r.Parts = slices.Clone(r.Parts)
	return &r, nil
}

// Stream is Generate delivering the response as deltas: text word by word
// (each word keeping its trailing white space), then each tool call whole,
// in one [llm.Delta]. onDelta may be nil.
func (m *Model) Stream(ctx context.Context, req *llm.Request, onDelta func(llm.Delta)) (*llm.Response, error) {
	resp, err := m.Generate(ctx, req)
	if err != nil {
		return nil, err
	}
	if onDelta != nil {
		if err := emit(ctx, resp, onDelta); err != nil {
			return nil, err
		}
	}
	return resp, nil
}

// render validates turn number n (from 1) and builds its response (nil for
// an error turn). The error says why the turn is invalid.
func render(n int, t Turn) (*llm.Response, error) {
	if err := validateTurn(t); err != nil {
		return nil, err
	}
	if t.Error != "" {
		return nil, nil
	}
	resp := &llm.Response{FinishReason: "stop"}
	if t.Text != "" {
		resp.Parts = append(resp.Parts, message.Text{Content: t.Text})
	}
	for i, c := range t.ToolCalls {
		args, err := argsText(c.Args)
		if err != nil {
			return nil, &callError{call: i + 1, err: err}
		}
		id := c.ID
		if id == "" {
			id = fmt.Sprintf("call_%d_%d", n, i+1)
		}
		resp.Parts = append(resp.Parts, message.ToolCall{ToolName: c.Tool, ToolCallID: id, Args: args})
		resp.FinishReason = "tool_calls"
	}
	return resp, nil
}

// validateTurn checks a turn's shape (not its arguments' encoding).
func validateTurn(t Turn) error {
	switch {
	case t.Error != "" && (t.Text != "" || len(t.ToolCalls) > 0):
		return errors.New("a turn with an error cannot also have text or tool_calls")
	case t.Error == "" && t.Text == "" && len(t.ToolCalls) == 0:
		return errors.New("a turn needs text, tool_calls or error")
	}
	ids := map[string]int{}
	for i, c := range t.ToolCalls {
		if err := tool.ValidateName(c.Tool); err != nil {
			return &callError{call: i + 1, err: err}
		}
		if c.ID == "" {
			continue
		}
		if j, dup := ids[c.ID]; dup {
			return &callError{call: i + 1, err: fmt.Errorf("id %q already used by tool call %d", c.ID, j)}
		}
		ids[c.ID] = i + 1
	}
	return nil
}

// callError is a turn's error about one of its tool calls (from 1).
type callError struct {
	call int
	err  error
}

func (e *callError) Error() string { return fmt.Sprintf("tool call %d: %v", e.call, e.err) }
func (e *callError) Unwrap() error { return e.err }

// argsText renders scripted arguments as the model's argument text.
func argsText(a any) (string, error) {
	switch v := a.(type) {
	case nil:
		return "{}", nil
	case string:
		return v, nil
	case json.RawMessage:
		return string(v), nil
	}
	b, err := json.Marshal(a)
	if err != nil {
		return "", fmt.Errorf("args: %w", err)
	}
	return string(b), nil
}
