package bgtest

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"

	"github.com/offload-dev/offload/pkg/agent"
	"github.com/offload-dev/offload/pkg/llm"
	"github.com/offload-dev/offload/pkg/message"
	"github.com/offload-dev/offload/pkg/tool"
)

// The scripted model and the helpers the tests of pkg/agent and
// pkg/agent/background share (each aliases them under its old names).

// FnModel is a model whose turns come from a function of the request count
// and the request. A nil response means the script ran out: the request
// fails with an error wrapping llm.ErrScriptExhausted, and the test the
// model is bound to (by NewAgent/NewAgentCfg) fails at its end, even if it
// ignored the run's error.
type FnModel struct {
	mu        sync.Mutex
	n         int
	fn        func(n int, req *llm.Request) *llm.Response
	reqs      []*llm.Request
	exhausted []int // the requests the script had no answer for
	bound     bool
}

// Model returns a model whose turns come from fn.
func Model(fn func(n int, req *llm.Request) *llm.Response) *FnModel { return &FnModel{fn: fn} }

// Turns returns a model answering with the given responses in order; a
// request beyond the last fails (and fails the test).
func Turns(rs ...*llm.Response) *FnModel {
	return Model(func(n int, _ *llm.Request) *llm.Response {
		if n >= len(rs) {
			return nil
		}
		return rs[n]
	})
}

// Bind makes the end of t fail if the script ran out during the test.
func (m *FnModel) Bind(t testing.TB) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.bound {
		return
	}
	m.bound = true
	t.Cleanup(func() {
		m.mu.Lock()
		defer m.mu.Unlock()
		if len(m.exhausted) > 0 {
			t.Errorf("the model's script ran out: requests %v had no scripted answer (%d requests in all)", m.exhausted, m.n)
		}
	})
}

// Name implements llm.Model.
func (m *FnModel) Name() string { return "fn" }

// Generate implements llm.Model.
func (m *FnModel) Generate(_ context.Context, req *llm.Request) (*llm.Response, error) {
	m.mu.Lock()
	n := m.n
	m.n++
	m.reqs = append(m.reqs, req)
	m.mu.Unlock()
	resp := m.fn(n, req)
	if resp == nil {
		m.mu.Lock()
		m.exhausted = append(m.exhausted, n)
		m.mu.Unlock()
		return nil, fmt.Errorf("test model: request %d: %w", n, llm.ErrScriptExhausted)
	}
	return resp, nil
}

// Stream implements llm.Model, with the response's text as one delta.
func (m *FnModel) Stream(ctx context.Context, req *llm.Request, onDelta func(llm.Delta)) (*llm.Response, error) {
	resp, err := m.Generate(ctx, req)
	if err == nil {
		for _, p := range resp.Parts {
			if t, ok := p.(message.Text); ok {
				onDelta(llm.Delta{Text: t.Content})
			}
		}
	}
	return resp, err
}

// Requests returns the requests the model got so far.
func (m *FnModel) Requests() []*llm.Request {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.reqs
}

// Text is a response of text s.
func Text(s string) *llm.Response {
	return &llm.Response{Parts: []message.Part{message.Text{Content: s}}}
}

// Calls is a response calling cs.
func Calls(cs ...message.ToolCall) *llm.Response {
	r := &llm.Response{}
	for _, c := range cs {
		r.Parts = append(r.Parts, c)
	}
	return r
}

// Call is a call of tool name with id and args.
func Call(name, id, args string) message.ToolCall {
	return message.ToolCall{ToolName: name, ToolCallID: id, Args: args}
}

// NewAgent is an agent of model m offering tools, failing t on an error.
func NewAgent(t *testing.T, m llm.Model, tools ...*tool.Tool) *agent.Agent {
	t.Helper()
	return NewAgentCfg(t, agent.Config{Model: m}, tools...)
}

// NewAgentCfg is NewAgent with cfg; an FnModel is bound to t.
func NewAgentCfg(t *testing.T, cfg agent.Config, tools ...*tool.Tool) *agent.Agent {
	t.Helper()
	if m, ok := cfg.Model.(*FnModel); ok {
		m.Bind(t)
	}
	if len(tools) > 0 {
		cfg.Toolsets = append(cfg.Toolsets, tool.MustSet(tools...))
	}
	a, err := agent.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// LastRequestParts returns the parts of the last request message sent to
// the model at request n.
func LastRequestParts(t *testing.T, m *FnModel, n int) []message.Part {
	t.Helper()
	reqs := m.Requests()
	if n >= len(reqs) {
		t.Fatalf("model got %d requests, want > %d", len(reqs), n)
	}
	msgs := reqs[n].Messages
	return msgs[len(msgs)-1].Parts
}

// XArgs are the arguments of the tests' arithmetic tools.
type XArgs struct {
	X int `json:"x"`
}

// ReturnContent is the model's text of p, a ToolReturn.
func ReturnContent(t *testing.T, p message.Part) string {
	t.Helper()
	r, ok := p.(message.ToolReturn)
	if !ok {
		t.Fatalf("part %T is not a ToolReturn", p)
	}
	return r.ModelText()
}

// MustJSON is v as JSON, failing t on an error.
func MustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
