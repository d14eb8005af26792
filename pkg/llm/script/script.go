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
// error, which the model returns instead of a response. A turn with When
// answers the requests that bring what it names; one without answers by
// count (see [Model]).
type Turn struct {
	// When, when set, makes the turn answer every request it matches
	// instead of a request chosen by count.
	When *When `json:"when,omitempty" yaml:"when,omitempty"`
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
	// ID is the call's ID, sent as written each time the turn answers.
	// Defaults to call_<turn>_<i>, both counted from 1; in a turn with
	// When, to call_<turn>_<i>_<r>, where r is the response's position in
	// the conversation (1 + the responses in the request's history), so
	// that a turn answering several requests does not repeat an ID.
	ID string `json:"id,omitempty" yaml:"id,omitempty"`
	// Args are the arguments: a string is sent exactly as written (so a
	// script can send invalid JSON), nil as {}, anything else as its JSON
	// encoding.
	Args any `json:"args,omitempty" yaml:"args,omitempty"`
}

// Model is a model that answers each request with a turn of a script: the
// first turn, in the script's order, whose When matches what the request
// brings; else the next turn without When, by count (the n-th turn without
// When answers the n-th request that no When matched, so a script without
// When answers the n-th request with its n-th turn). A turn with When
// answers every request it matches; the turns without When are used once.
// It never cycles: when no When matches and the turns without When are
// used up, the request fails with an error wrapping
// [llm.ErrScriptExhausted]. It is safe for concurrent use; concurrent
// requests take the turns without When in the order they acquire the
// model.
type Model struct {
	name    string
	turns   []prepared
	counted []int // the turns without When, by index
	when    bool  // some turn has a When

	mu       sync.Mutex
	requests int // requests answered or failed
	used     int // turns without When used
}

var _ llm.Model = (*Model)(nil)

// prepared is a turn rendered once, at construction: its response, or the
// error to return.
type prepared struct {
	turn Turn
	resp *llm.Response
	err  error
}

// FromTurns returns a model answering with turns as [Model] says: by When,
// else in order, one per request. An empty name defaults to [DefaultName].
// Turns are validated as [Parse] validates them, but an invalid turn is
// reported only when it is reached: Generate then returns an error wrapping
// [ErrInvalidScript]. A turn whose When itself is invalid is reached by the
// first request that gets to it in the script's order.
func FromTurns(name string, turns []Turn) *Model {
	if name == "" {
		name = DefaultName
	}
	m := &Model{name: name, turns: make([]prepared, len(turns))}
	for i, t := range turns {
		n := i + 1
		resp, err := render(n, t, 0)
		switch {
		case err != nil:
			err = fmt.Errorf("script %q: %w: turn %d: %w", name, ErrInvalidScript, n, err)
		case t.Error != "":
			err = fmt.Errorf("script %q: turn %d: %w: %s", name, n, ErrScriptedFailure, t.Error)
		default:
			resp.ModelName = name
		}
		m.turns[i] = prepared{turn: t, resp: resp, err: err}
		if t.When != nil {
			m.when = true
		} else {
			m.counted = append(m.counted, i)
		}
	}
	return m
}

// Name returns the model's name.
func (m *Model) Name() string { return m.name }

// Len returns the number of turns in the script.
func (m *Model) Len() int { return len(m.turns) }

// Remaining returns the number of turns without When not used yet (turns
// with When are never used up).
func (m *Model) Remaining() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.counted) - m.used
}

// Generate returns the response of the turn that answers req (see
// [Model]). It returns ctx.Err() (without using a turn) when ctx is done,
// an error wrapping [ErrScriptedFailure] for a turn with an Error, an error
// wrapping [ErrInvalidScript] for an invalid turn, and an error wrapping
// [llm.ErrScriptExhausted] when no turn answers it.
func (m *Model) Generate(ctx context.Context, req *llm.Request) (*llm.Response, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	parts, responses := brought(req)
	chosen := -1
	for i, p := range m.turns {
		if w := p.turn.When; w != nil && (w.validate() != nil || w.matches(parts)) {
			chosen = i
			break
		}
	}
	m.mu.Lock()
	m.requests++
	n := m.requests
	if chosen < 0 && m.used < len(m.counted) {
		chosen = m.counted[m.used]
		m.used++
	}
	m.mu.Unlock()
	switch {
	case chosen < 0 && !m.when:
		return nil, fmt.Errorf("script %q: request %d: %w (the script has %d turns)", m.name, n, llm.ErrScriptExhausted, len(m.turns))
	case chosen < 0 && len(m.counted) == 0:
		return nil, fmt.Errorf("script %q: request %d: %w (no turn's when matches it, and the script has no turn without when)", m.name, n, llm.ErrScriptExhausted)
	case chosen < 0 && len(m.counted) == 1:
		return nil, fmt.Errorf("script %q: request %d: %w (no turn's when matches it, and the turn without when is used up)", m.name, n, llm.ErrScriptExhausted)
	case chosen < 0:
		return nil, fmt.Errorf("script %q: request %d: %w (no turn's when matches it, and the %d turns without when are used up)", m.name, n, llm.ErrScriptExhausted, len(m.counted))
	}
	p := m.turns[chosen]
	if p.err != nil {
		return nil, p.err
	}
	if p.turn.When != nil {
		resp, err := render(chosen+1, p.turn, responses+1)
		if err != nil { // validated at construction
			return nil, fmt.Errorf("script %q: %w: turn %d: %w", m.name, ErrInvalidScript, chosen+1, err)
		}
		resp.ModelName = m.name
		return resp, nil
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
// an error turn), as the response at position r of the conversation (0 for
// a turn without When: its default IDs do not name it). The error says why
// the turn is invalid.
func render(n int, t Turn, r int) (*llm.Response, error) {
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
		switch {
		case id != "":
		case r > 0:
			id = fmt.Sprintf("call_%d_%d_%d", n, i+1, r)
		default:
			id = fmt.Sprintf("call_%d_%d", n, i+1)
		}
		resp.Parts = append(resp.Parts, message.ToolCall{ToolName: c.Tool, ToolCallID: id, Args: args})
		resp.FinishReason = "tool_calls"
	}
	return resp, nil
}

// validateTurn checks a turn's shape (not its arguments' encoding).
func validateTurn(t Turn) error {
	if t.When != nil {
		if err := t.When.validate(); err != nil {
			return err
		}
	}
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
