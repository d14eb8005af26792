package main

import (
	"context"
	"encoding/json"
	"fmt"
	"runtime"
	"sync"
	"time"

	"github.com/offload-dev/offload/internal/benchcall"
	"github.com/offload-dev/offload/pkg/agent"
	"github.com/offload-dev/offload/pkg/agent/background"
	"github.com/offload-dev/offload/pkg/llm"
	"github.com/offload-dev/offload/pkg/llm/script"
	"github.com/offload-dev/offload/pkg/message"
	"github.com/offload-dev/offload/pkg/tool"
)

// backgroundCaller returns a caller that runs one agent run whose model
// calls the remote lookup tool in the background and waits for its
// follow-up; it measures from the model's response holding the call to the
// model request holding the follow-up: dispatch → worker → result →
// injected as a follow-up.
func (s *offloadSystem) backgroundCaller() (caller, error) {
	return backgroundRun(s.remote, s.remote.Executor(nil), nil)
}

// backgroundLoopCaller is backgroundCaller with the in-process executor and
// a local lookup tool whose handler does not decode its arguments: the
// agent loop's own part of the background round trip. The tool returns
// once the model has answered "waiting", so that, as in the JetStream
// row, the outcome reaches a loop waiting for its live task.
func backgroundLoopCaller() (caller, error) {
	var mu sync.Mutex
	var gate chan struct{}
	typed := benchcall.Lookup()
	local := tool.MustNew(typed.Def(), func(ctx context.Context, _ *tool.RunContext, _ json.RawMessage) (any, error) {
		mu.Lock()
		g := gate
		mu.Unlock()
		select {
		case <-g:
			return benchcall.Output, nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	})
	return backgroundRun(tool.MustSet(local), background.InProcessExecutor{}, func(start bool) {
		mu.Lock()
		defer mu.Unlock()
		if start {
			gate = make(chan struct{})
		} else {
			close(gate)
		}
	})
}

// backgroundRun returns a caller of one agent run with ts's lookup tool
// run in the background by exec, timed from the model's response holding
// the call to the model request holding its follow-up. waiting, if not
// nil, is called with true as the run starts and with false when the model
// answers "waiting".
func backgroundRun(ts tool.Toolset, exec background.Executor, waiting func(start bool)) (caller, error) {
	var mu sync.Mutex
	var sent, seen time.Time
	var answered bool
	model := script.New("bench-background", func(_ context.Context, req *llm.Request) (*llm.Response, error) {
		if len(req.Messages) <= 2 { // system prompt and user prompt
			defer func() {
				mu.Lock()
				sent = time.Now()
				mu.Unlock()
			}()
			return benchcall.Call(), nil
		}
		if benchcall.FollowUps(req, "lookup") == 1 {
			mu.Lock()
			seen = time.Now()
			mu.Unlock()
			return &llm.Response{Parts: []message.Part{message.Text{Content: "done"}}}, nil
		}
		mu.Lock()
		first := !answered
		answered = true
		mu.Unlock()
		if first && waiting != nil {
			waiting(false)
		}
		return &llm.Response{Parts: []message.Part{message.Text{Content: "waiting"}}}, nil
	})
	a, err := agent.New(agent.Config{
		Model:        model,
		Toolsets:     []tool.Toolset{ts},
		Capabilities: []agent.Capability{background.Tools(background.Config{Tools: background.SelectNames("lookup"), Executor: exec})},
		Limits:       agent.UsageLimits{Requests: agent.Unlimited()},
	})
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context) (time.Duration, error) {
		mu.Lock()
		answered = false
		mu.Unlock()
		if waiting != nil {
			waiting(true)
		}
		res, err := a.Run(ctx, "look it up", nil)
		if err != nil {
			return 0, err
		}
		if res.Output != "done" {
			return 0, fmt.Errorf("background run ended with %q", res.Output)
		}
		mu.Lock()
		defer mu.Unlock()
		return seen.Sub(sent), nil
	}, nil
}

// pendingMemory is the agent's memory per pending background call.
type pendingMemory struct {
	calls       int
	heap, stack uint64 // growth while the calls were pending
}

// measurePendingMemory runs an agent whose model starts calls background
// calls at once of a remote tool held on a gate, and measures the
// process's heap (after a GC) and goroutine stacks while every call is
// pending, against before the run; then it opens the gate and lets the run
// finish. The worker holds only its slots; the rest of the tasks wait in
// the stream, as they would for a busy pool.
func measurePendingMemory(ctx context.Context, ep endpoint, calls int) (pendingMemory, error) {
	nc, err := ep.connect("bench pending")
	if err != nil {
		return pendingMemory{}, err
	}
	defer nc.Close()
	gate := make(chan struct{})
	hold := tool.Func("hold", "Waits for the gate.", func(ctx context.Context, _ *tool.RunContext, _ struct{}) (string, error) {
		select {
		case <-gate:
			return "ok", nil
		case <-ctx.Done():
			return "", ctx.Err()
		}
	})
	sv, err := serveTool(ctx, nc, "bench-pending", hold, 16)
	if err != nil {
		return pendingMemory{}, err
	}
	defer sv.stop()
	rt := sv.rt

	var before, during runtime.MemStats
	var once sync.Once
	model := script.New("bench-pending", func(_ context.Context, req *llm.Request) (*llm.Response, error) {
		if len(req.Messages) <= 2 {
			parts := make([]message.Part, calls)
			for i := range calls {
				parts[i] = message.ToolCall{ToolName: "hold", ToolCallID: fmt.Sprintf("call_%d", i), Args: "{}"}
			}
			return &llm.Response{Parts: parts}, nil
		}
		once.Do(func() {
			// Every call has started and none has finished: measure, then
			// let them finish.
			runtime.GC()
			runtime.ReadMemStats(&during)
			close(gate)
		})
		if benchcall.FollowUps(req, "hold") == calls {
			return &llm.Response{Parts: []message.Part{message.Text{Content: "all done"}}}, nil
		}
		return &llm.Response{Parts: []message.Part{message.Text{Content: "waiting"}}}, nil
	})
	a, err := agent.New(agent.Config{
		Model:        model,
		Toolsets:     []tool.Toolset{rt},
		Capabilities: []agent.Capability{background.Tools(background.Config{Tools: background.SelectAll(), Executor: rt.Executor(nil)})},
		Limits:       agent.UsageLimits{Requests: agent.Unlimited()},
	})
	if err != nil {
		return pendingMemory{}, err
	}
	runtime.GC()
	runtime.ReadMemStats(&before)
	rctx, rcancel := context.WithTimeout(ctx, 5*time.Minute)
	defer rcancel()
	res, err := a.Run(rctx, "start them all", nil)
	if err != nil {
		return pendingMemory{}, err
	}
	if res.Output != "all done" {
		return pendingMemory{}, fmt.Errorf("pending run ended with %q", res.Output)
	}
	return pendingMemory{
		calls: calls,
		heap:  during.HeapAlloc - min(before.HeapAlloc, during.HeapAlloc),
		stack: during.StackInuse - min(before.StackInuse, during.StackInuse),
	}, nil
}
