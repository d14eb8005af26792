package script_test

import (
	"context"
	"errors"
	"reflect"
	"testing"

	"github.com/offload-dev/offload/pkg/llm"
	"github.com/offload-dev/offload/pkg/llm/script"
	"github.com/offload-dev/offload/pkg/message"
)

func TestFuncModel(t *testing.T) {
	t.Parallel()
	shared := &llm.Response{Parts: []message.Part{
		message.Text{Content: "calling tools"},
		message.ToolCall{ToolName: "a", ToolCallID: "1", Args: `{"x":1}`},
	}}
	var seen *llm.Request
	m := script.New("", func(_ context.Context, r *llm.Request) (*llm.Response, error) {
		seen = r
		return shared, nil
	})
	if m.Name() != script.DefaultFuncName {
		t.Fatalf("name %q", m.Name())
	}
	resp := generate(t, m)
	if seen != req || resp.ModelName != script.DefaultFuncName || shared.ModelName != "" {
		t.Fatalf("resp %+v, shared %+v", resp, shared)
	}
	var ds []llm.Delta
	sresp, err := m.Stream(t.Context(), req, func(d llm.Delta) { ds = append(ds, d) })
	if err != nil || !reflect.DeepEqual(sresp, resp) {
		t.Fatalf("Stream = %+v, %v", sresp, err)
	}
	want := []llm.Delta{{Text: "calling "}, {Text: "tools"}, {ToolCall: &message.ToolCall{ToolName: "a", ToolCallID: "1", Args: `{"x":1}`}}}
	if !reflect.DeepEqual(ds, want) {
		t.Fatalf("deltas = %+v", ds)
	}
	if _, err := m.Stream(t.Context(), req, nil); err != nil {
		t.Fatalf("Stream with nil onDelta: %v", err)
	}
}

func TestFuncModelErrors(t *testing.T) {
	t.Parallel()
	boom := errors.New("boom")
	failing := script.New("f", func(context.Context, *llm.Request) (*llm.Response, error) { return nil, boom })
	if _, err := failing.Generate(t.Context(), req); !errors.Is(err, boom) {
		t.Fatalf("err = %v", err)
	}
	if _, err := failing.Stream(t.Context(), req, nil); !errors.Is(err, boom) {
		t.Fatalf("stream err = %v", err)
	}
	empty := script.New("f", func(context.Context, *llm.Request) (*llm.Response, error) { return nil, nil })
	if _, err := empty.Generate(t.Context(), req); err == nil {
		t.Fatal("nil response: want an error")
	}
	called := false
	m := script.New("f", func(context.Context, *llm.Request) (*llm.Response, error) {
		called = true
		return &llm.Response{}, nil
	})
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := m.Generate(ctx, req); !errors.Is(err, context.Canceled) || called {
		t.Fatalf("cancelled Generate: %v (called %v)", err, called)
	}
	if _, err := m.Stream(ctx, req, nil); !errors.Is(err, context.Canceled) || called {
		t.Fatalf("cancelled Stream: %v (called %v)", err, called)
	}
	defer func() {
		if recover() == nil {
			t.Fatal("New(nil) did not panic")
		}
	}()
	script.New("x", nil)
}

func TestFuncModelWithStream(t *testing.T) {
	t.Parallel()
	m := script.New("f",
		func(context.Context, *llm.Request) (*llm.Response, error) {
			t.Error("Generate func called by Stream")
			return nil, nil
		},
		script.WithStream(func(_ context.Context, _ *llm.Request, onDelta func(llm.Delta)) (*llm.Response, error) {
			onDelta(llm.Delta{Text: "whole"})
			return &llm.Response{Parts: []message.Part{message.Text{Content: "whole"}}}, nil
		}))
	var ds []llm.Delta
	resp, err := m.Stream(t.Context(), req, func(d llm.Delta) { ds = append(ds, d) })
	if err != nil || resp.ModelName != "f" || !reflect.DeepEqual(ds, []llm.Delta{{Text: "whole"}}) {
		t.Fatalf("Stream = %+v, %v, deltas %+v", resp, err, ds)
	}
	if _, err := m.Stream(t.Context(), req, nil); err != nil {
		t.Fatalf("nil onDelta: %v", err)
	}
}
