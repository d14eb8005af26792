package agent_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/offload-dev/offload/pkg/agent"
	"github.com/offload-dev/offload/pkg/llm"
	"github.com/offload-dev/offload/pkg/tool"
)

// scripted returns a tool that answers its n-th run with outcomes[n] ("ok",
// "retry" or "fail") and records the retry count each run saw.
func scripted(name string, retries int, outcomes ...string) (*tool.Tool, func() string) {
	var mu sync.Mutex
	var seen []string
	t := tool.Func(name, "", func(_ context.Context, rc *tool.RunContext, _ struct{}) (string, error) {
		mu.Lock()
		n := len(seen)
		seen = append(seen, mustJSONAny(rc.Retry))
		mu.Unlock()
		switch outcomes[n] {
		case "retry":
			return "", tool.Retry("try again")
		case "fail":
			return "", tool.Fail("broken")
		}
		return "ok", nil
	}, tool.Retries(retries))
	return t, func() string {
		mu.Lock()
		defer mu.Unlock()
		return strings.Join(seen, ",")
	}
}

// repeat returns a model calling name once per turn, n turns, then
// answering "done".
func repeat(name string, n int) *fnModel {
	var rs []*llm.Response
	for i := range n {
		rs = append(rs, calls(call(name, fmt.Sprintf("c%d", i+1), "{}")))
	}
	return turns(append(rs, text("done"))...)
}

// A step where the tool only succeeds gives it its whole budget back:
// retry, ok, retry, ok passes with one retry allowed.
func TestSuccessfulStepResetsRetries(t *testing.T) {
	t.Parallel()
	tl, seen := scripted("flaky", 1, "retry", "ok", "retry", "ok")
	m := repeat("flaky", 4)
	res, err := newAgent(t, m, tl).Run(t.Context(), "go", nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Output != "done" || seen() != "0,1,0,1" {
		t.Errorf("output %q, retry counts seen %s, want 0,1,0,1", res.Output, seen())
	}
	wantRequests(t, m, 5)
}

// A ToolFailed uses no retry: after two failures the tool still has its one
// retry, and the retry after it is allowed.
func TestToolFailedLeavesRetryBudget(t *testing.T) {
	t.Parallel()
	tl, seen := scripted("flaky", 1, "fail", "fail", "retry", "ok")
	m := repeat("flaky", 4)
	res, err := newAgent(t, m, tl).Run(t.Context(), "go", nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Output != "done" || seen() != "0,0,0,1" {
		t.Errorf("output %q, retry counts seen %s, want 0,0,0,1", res.Output, seen())
	}
	wantRequests(t, m, 5)
}

// With its budget used, the next retry ends the run: the retry after the
// failures is the one too many when the budget is 0.
func TestRetryBudgetZeroAfterFailures(t *testing.T) {
	t.Parallel()
	tl, seen := scripted("flaky", 0, "fail", "retry")
	m := repeat("flaky", 2)
	_, err := newAgent(t, m, tl).Run(t.Context(), "go", nil)
	var umb *agent.UnexpectedModelBehavior
	if !errors.As(err, &umb) || !strings.HasPrefix(err.Error(), "Tool 'flaky' exceeded max retries count of 0.") {
		t.Fatalf("err = %v", err)
	}
	if seen() != "0,0" {
		t.Errorf("retry counts seen %s", seen())
	}
	wantRequests(t, m, 2)
}
