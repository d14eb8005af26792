package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/offload-dev/offload/pkg/agent"
	"github.com/offload-dev/offload/pkg/agent/background"
	"github.com/offload-dev/offload/pkg/llm"
	"github.com/offload-dev/offload/pkg/llm/script"
	"github.com/offload-dev/offload/pkg/message"
	"github.com/offload-dev/offload/pkg/natsjs/remote"
	"github.com/offload-dev/offload/pkg/tool"
)

// overlapResult is one overlap run: the run's wall time and the time spent
// in the model.
type overlapResult struct {
	elapsed, model time.Duration
}

// ratio is the run's time over the ideal: the tool's duration plus the
// model's time.
func (r overlapResult) ratio(work time.Duration) float64 {
	return float64(r.elapsed) / float64(work+r.model)
}

// measureOverlap runs an agent whose model calls the background tool
// "work" calls times in its first response and then waits for every
// follow-up; one worker replica with slots slots serves the tool, which
// takes work. It returns the median of rounds runs.
func measureOverlap(ctx context.Context, ep endpoint, calls, slots, rounds int, work time.Duration) (overlapResult, error) {
	nc, err := ep.connect("bench overlap")
	if err != nil {
		return overlapResult{}, err
	}
	defer nc.Close()
	workTool := tool.Func("work", "Work for a while.", func(ctx context.Context, _ *tool.RunContext, _ struct{}) (string, error) {
		t := time.NewTimer(work)
		defer t.Stop()
		select {
		case <-t.C:
			return "done", nil
		case <-ctx.Done():
			return "", ctx.Err()
		}
	}, tool.Meta(map[string]any{"background": true}))
	sv, err := serveTool(ctx, nc, "bench-overlap", workTool, slots)
	if err != nil {
		return overlapResult{}, err
	}
	defer sv.stop()
	rt := sv.rt

	results := make([]overlapResult, 0, rounds)
	for range rounds {
		r, err := overlapRun(ctx, rt, calls)
		if err != nil {
			return overlapResult{}, err
		}
		results = append(results, r)
	}
	slices.SortFunc(results, func(a, b overlapResult) int { return int(a.elapsed - b.elapsed) })
	return results[len(results)/2], nil
}

// overlapRun is one agent run of measureOverlap.
func overlapRun(ctx context.Context, rt *remote.Toolset, calls int) (overlapResult, error) {
	var mu sync.Mutex
	var modelTime time.Duration
	model := script.New("overlap", func(_ context.Context, req *llm.Request) (*llm.Response, error) {
		start := time.Now()
		defer func() {
			mu.Lock()
			modelTime += time.Since(start)
			mu.Unlock()
		}()
		if len(req.Messages) <= 2 { // system prompt and user prompt
			parts := make([]message.Part, calls)
			for i := range calls {
				parts[i] = message.ToolCall{ToolName: "work", ToolCallID: fmt.Sprintf("call_%d", i), Args: "{}"}
			}
			return &llm.Response{Parts: parts}, nil
		}
		followUps := 0
		for _, m := range req.Messages {
			for _, p := range m.Parts {
				if u, ok := p.(message.UserPrompt); ok && len(u.Content) > 0 && strings.HasPrefix(u.Content[0].Text, "Background tool 'work'") {
					followUps++
				}
			}
		}
		if followUps == calls {
			return &llm.Response{Parts: []message.Part{message.Text{Content: "all done"}}}, nil
		}
		return &llm.Response{Parts: []message.Part{message.Text{Content: "waiting"}}}, nil
	})
	a, err := agent.New(agent.Config{
		Model:        model,
		Toolsets:     []tool.Toolset{rt},
		Capabilities: []agent.Capability{background.Tools(background.Config{Executor: rt.Executor(nil)})},
		Limits:       agent.UsageLimits{Requests: agent.Unlimited()},
	})
	if err != nil {
		return overlapResult{}, err
	}
	start := time.Now()
	res, err := a.Run(ctx, "do the work", nil)
	elapsed := time.Since(start)
	if err != nil {
		return overlapResult{}, err
	}
	if res.Output != "all done" {
		return overlapResult{}, fmt.Errorf("overlap run ended with %q", res.Output)
	}
	mu.Lock()
	defer mu.Unlock()
	return overlapResult{elapsed: elapsed, model: modelTime}, nil
}

// waitForTool waits until the registry shows the named tool.
func waitForTool(ctx context.Context, rt *remote.Toolset, name string) error {
	for {
		changed := rt.Changed()
		tools, _ := rt.Tools(ctx)
		if slices.ContainsFunc(tools, func(t *tool.Tool) bool { return t.Name == name }) {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return fmt.Errorf("tool %s never appeared in the registry: %w", name, ctx.Err())
		}
	}
}
