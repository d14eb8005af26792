package script

import (
	"context"
	"errors"
	"fmt"

	"github.com/offload-dev/offload/pkg/llm"
	"github.com/offload-dev/offload/pkg/message"
)

// DefaultFuncName is the name of a [FuncModel] created with an empty name.
const DefaultFuncName = "function"

// GenerateFunc answers a request; see [New].
type GenerateFunc func(ctx context.Context, req *llm.Request) (*llm.Response, error)

// StreamFunc answers a request incrementally, calling onDelta for each
// fragment before returning the assembled response; see [WithStream].
type StreamFunc func(ctx context.Context, req *llm.Request, onDelta func(llm.Delta)) (*llm.Response, error)

// Option configures a [FuncModel].
type Option func(*FuncModel)

// WithStream makes [FuncModel.Stream] call fn instead of deriving the stream
// from the GenerateFunc.
func WithStream(fn StreamFunc) Option {
	return func(m *FuncModel) { m.stream = fn }
}

// FuncModel is a model whose responses come from a Go function (pydantic-ai's
// FunctionModel): use it for precise multi-turn scripts and to assert on what
// the agent sent. It is safe for concurrent use if its functions are.
type FuncModel struct {
	name     string
	generate GenerateFunc
	stream   StreamFunc
}

var _ llm.Model = (*FuncModel)(nil)

// New returns a model that answers each request with fn. An empty name
// defaults to [DefaultFuncName]. Responses without a ModelName get the
// model's name. New panics if fn is nil.
func New(name string, fn GenerateFunc, opts ...Option) *FuncModel {
	if fn == nil {
		panic("script: New with a nil GenerateFunc")
	}
	if name == "" {
		name = DefaultFuncName
	}
	m := &FuncModel{name: name, generate: fn}
	for _, o := range opts {
		o(m)
	}
	return m
}

// Name returns the model's name.
func (m *FuncModel) Name() string { return m.name }

// Generate returns fn's response. It returns ctx.Err() when ctx is done
// before the call, fn's error as is, and an error when fn returns neither a
// response nor an error.
func (m *FuncModel) Generate(ctx context.Context, req *llm.Request) (*llm.Response, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	resp, err := m.generate(ctx, req)
	return m.finish(resp, err)
}

// Stream calls the StreamFunc given with [WithStream]; without one it calls
// the GenerateFunc and delivers its response as deltas: text word by word
// (each word keeping its trailing white space) and each tool call whole, in
// one [llm.Delta]. onDelta may be nil.
func (m *FuncModel) Stream(ctx context.Context, req *llm.Request, onDelta func(llm.Delta)) (*llm.Response, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if onDelta == nil {
		onDelta = func(llm.Delta) {}
	}
	if m.stream != nil {
		return m.finish(m.stream(ctx, req, onDelta))
	}
	resp, err := m.finish(m.generate(ctx, req))
	if err != nil {
		return nil, err
	}
	if err := emit(ctx, resp, onDelta); err != nil {
		return nil, err
	}
	return resp, nil
}

func (m *FuncModel) finish(resp *llm.Response, err error) (*llm.Response, error) {
	if err != nil {
		return nil, err
	}
	if resp == nil {
		return nil, fmt.Errorf("script: model %q: %w", m.name, errNoResponse)
	}
	if resp.ModelName == "" {
		r := *resp
		r.ModelName = m.name
		resp = &r
	}
	return resp, nil
}

var errNoResponse = errors.New("function returned neither a response nor an error")

// emit delivers resp as deltas, checking ctx between them.
func emit(ctx context.Context, resp *llm.Response, onDelta func(llm.Delta)) error {
	idx := 0
	for _, p := range resp.Parts {
		switch p := p.(type) {
		case message.Text:
			for _, w := range llm.SplitWords(p.Content) {
				if err := ctx.Err(); err != nil {
					return err
				}
				onDelta(llm.Delta{Text: w})
			}
		case message.ToolCall:
			if err := ctx.Err(); err != nil {
				return err
			}
			onDelta(llm.Delta{ToolCallIndex: idx, ToolCall: &p})
			idx++
		}
	}
	return nil
}
