package background_test

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

// fnModel is a model whose turns come from a function of the request count
// and the request. A nil response means the script ran out: the request
// fails with an error wrapping llm.ErrScriptExhausted, and the test the
// model is bound to (by newAgent/newAgentCfg) fails at its end, even if it
// ignored the run's error.
type fnModel struct {
	mu        sync.Mutex
	n         int
	fn        func(n int, req *llm.Request) *llm.Response
	reqs      []*llm.Request
	exhausted []int // the requests the script had no answer for
	bound     bool
}

func model(fn func(n int, req *llm.Request) *llm.Response) *fnModel { return &fnModel{fn: fn} }

// turns returns a model answering with the given responses in order; a
// request beyond the last fails (and fails the test).
func turns(rs ...*llm.Response) *fnModel {
	return model(func(n int, _ *llm.Request) *llm.Response {
		if n >= len(rs) {
			return nil
		}
		return rs[n]
	})
}

// bind makes the end of t fail if the script ran out during the test.
func (m *fnModel) bind(t testing.TB) {
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

func (m *fnModel) Name() string { return "fn" }

func (m *fnModel) Generate(_ context.Context, req *llm.Request) (*llm.Response, error) {
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

func (m *fnModel) Stream(ctx context.Context, req *llm.Request, onDelta func(llm.Delta)) (*llm.Response, error) {
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

func (m *fnModel) requests() []*llm.Request {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.reqs
}

func text(s string) *llm.Response {
	return &llm.Response{Parts: []message.Part{message.Text{Content: s}}}
}

func calls(cs ...message.ToolCall) *llm.Response {
	r := &llm.Response{}
	for _, c := range cs {
		r.Parts = append(r.Parts, c)
	}
	return r
}

func call(name, id, args string) message.ToolCall {
	return message.ToolCall{ToolName: name, ToolCallID: id, Args: args}
}

func newAgent(t *testing.T, m llm.Model, tools ...*tool.Tool) *agent.Agent {
	t.Helper()
	return newAgentCfg(t, agent.Config{Model: m}, tools...)
}

func newAgentCfg(t *testing.T, cfg agent.Config, tools ...*tool.Tool) *agent.Agent {
	t.Helper()
	if m, ok := cfg.Model.(*fnModel); ok {
		m.bind(t)
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

// lastRequestParts returns the parts of the last request message sent to
// the model at request n.
func lastRequestParts(t *testing.T, m *fnModel, n int) []message.Part {
	t.Helper()
	reqs := m.requests()
	if n >= len(reqs) {
		t.Fatalf("model got %d requests, want > %d", len(reqs), n)
	}
	msgs := reqs[n].Messages
	return msgs[len(msgs)-1].Parts
}

type xArgs struct {
	X int `json:"x"`
}

func returnContent(t *testing.T, p message.Part) string {
	t.Helper()
	r, ok := p.(message.ToolReturn)
	if !ok {
		t.Fatalf("part %T is not a ToolReturn", p)
	}
	return r.ModelText()
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func times42(name string, opts ...tool.Option) *tool.Tool {
	return tool.Func(name, "", func(_ context.Context, _ *tool.RunContext, a xArgs) (int, error) { return a.X * 42, nil }, opts...)
}
