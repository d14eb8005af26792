// Scenarios of usage limits and tool call slots.

package bgtest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/offload-dev/offload/internal/offloadtest"
	"github.com/offload-dev/offload/pkg/agent"
	"github.com/offload-dev/offload/pkg/llm"
	"github.com/offload-dev/offload/pkg/tool"
)

// Scenario: test_retry_exhaustion_terminates_run
func retryExhaustion(t *testing.T, h Harness) {
	broken := tool.Func("broken", "", func(context.Context, *tool.RunContext, struct{}) (string, error) {
		return "", tool.Retry("again")
	}, bg(), tool.Retries(0))
	m, _ := newModel(untilFollowUps(1, calls(call("broken", "c1", "{}"))))
	_, err := newAgent(t, h, m, setup{}, broken).Run(runCtx(t), "go", nil)
	var umb *agent.UnexpectedModelBehavior
	if !errors.As(err, &umb) || !strings.Contains(err.Error(), "Tool 'broken' exceeded max retries count of 0") {
		t.Fatalf("err = %v", err)
	}
}

// Scenario: test_completed_background_call_is_counted_once
func countedOnce(t *testing.T, h Harness) {
	quick := tool.Func("quick", "", func(context.Context, *tool.RunContext, struct{}) (string, error) { return "ok", nil }, bg())
	m, _ := newModel(untilFollowUps(1, calls(call("quick", "c1", "{}"))))
	res, err := newAgent(t, h, m, setup{}, quick).Run(runCtx(t), "go", nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Usage.ToolCalls != 1 {
		t.Errorf("tool_calls = %d, want 1", res.Usage.ToolCalls)
	}
}

// Scenario: test_pending_background_call_counts_toward_tool_call_limit
func pendingCountsTowardLimit(t *testing.T, h Harness) {
	var started atomic.Int32
	first := make(chan struct{})
	slow := tool.Func("slow", "", func(ctx context.Context, _ *tool.RunContext, _ struct{}) (string, error) {
		if started.Add(1) == 1 {
			close(first)
		}
		<-ctx.Done()
		return "", ctx.Err()
	}, bg())
	m, _ := newModel(func(n int, _ *llm.Request) *llm.Response {
		if n > 0 {
			offloadtest.WaitOrTimeout(t, first, "the first call to start")
		}
		return calls(call("slow", fmt.Sprintf("c%d", n), "{}"))
	})
	_, err := newAgent(t, h, m, setup{cfg: agent.Config{Limits: agent.UsageLimits{ToolCalls: agent.Limit(1)}}}, slow).Run(runCtx(t), "go", nil)
	var ule *agent.UsageLimitExceeded
	if !errors.As(err, &ule) || ule.Limit != "tool_calls_limit" {
		t.Fatalf("err = %v", err)
	}
	if n := started.Load(); n != 1 {
		t.Errorf("slow started %d times, want 1", n)
	}
}

// Scenario: test_pre_start_cancellation_releases_reserved_tool_usage
// (A task cancelled when the run ends gives its tool call slot back.)
func releasesReservation(t *testing.T, h Harness) {
	started := make(chan struct{})
	slow := untilCancelled("slow", started, nil)
	broken := tool.Func("broken", "", func(ctx context.Context, _ *tool.RunContext, _ struct{}) (string, error) {
		select {
		case <-started:
		case <-ctx.Done():
		}
		return "", tool.Retry("again")
	}, tool.Retries(0))
	m, _ := newModel(untilFollowUps(99, calls(call("slow", "c1", "{}"), call("broken", "c2", "{}"))))
	res, err := newAgent(t, h, m, setup{}, slow, broken).Run(runCtx(t), "go", nil)
	var umb *agent.UnexpectedModelBehavior
	if !errors.As(err, &umb) {
		t.Fatalf("err = %v", err)
	}
	if res.Usage.ToolCalls != 0 {
		t.Errorf("tool_calls = %d, want 0", res.Usage.ToolCalls)
	}
}
