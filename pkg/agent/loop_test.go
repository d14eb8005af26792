package agent_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/offload-dev/offload/pkg/agent"
	"github.com/offload-dev/offload/pkg/llm"
	"github.com/offload-dev/offload/pkg/message"
	"github.com/offload-dev/offload/pkg/progress"
	"github.com/offload-dev/offload/pkg/tool"
)

func TestParallelToolsLandInEmissionOrder(t *testing.T) {
	t.Parallel()
	// slow finishes only after fast's result event: completion order is the
	// reverse of emission order.
	fastDone := make(chan struct{})
	slow := tool.Func("slow", "", func(ctx context.Context, _ *tool.RunContext, _ struct{}) (string, error) {
		select {
		case <-fastDone:
			return "slow result", nil
		case <-ctx.Done():
			return "", ctx.Err()
		}
	})
	fast := tool.Func("fast", "", func(context.Context, *tool.RunContext, struct{}) (string, error) {
		return "fast result", nil
	})
	m := turns(calls(call("slow", "c1", "{}"), call("fast", "c2", "{}")), text("done"))
	var order []string
	a := newAgent(t, m, slow, fast)
	res, err := a.Run(t.Context(), "go", &agent.RunOptions{OnEvent: func(e agent.Event) {
		if e.Type == agent.EventToolResult {
			order = append(order, e.Tool)
			if e.Tool == "fast" {
				close(fastDone)
			}
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(order, ","); got != "fast,slow" {
		t.Errorf("result events in completion order = %s, want fast,slow", got)
	}
	parts := lastRequestParts(t, m, 1)
	if len(parts) != 2 || parts[0].(message.ToolReturn).ToolCallID != "c1" || parts[1].(message.ToolReturn).ToolCallID != "c2" {
		t.Fatalf("history parts not in emission order: %+v", parts)
	}
	if res.Output != "done" {
		t.Errorf("output = %q", res.Output)
	}
	if res.Usage.ToolCalls != 2 || res.Usage.Requests != 2 {
		t.Errorf("usage = %+v", res.Usage)
	}
}

func TestSequentialToolRunsAlone(t *testing.T) {
	t.Parallel()
	var running, maxRunning atomic.Int32
	body := func(context.Context, *tool.RunContext, struct{}) (string, error) {
		n := running.Add(1)
		defer running.Add(-1)
		for {
			m := maxRunning.Load()
			if n <= m || maxRunning.CompareAndSwap(m, n) {
				break
			}
		}
		return "ok", nil
	}
	seq := tool.Func("seq", "", body, tool.Sequential())
	m := turns(calls(call("seq", "c1", "{}"), call("seq", "c2", "{}")), text("done"))
	if _, err := newAgent(t, m, seq).Run(t.Context(), "go", nil); err != nil {
		t.Fatal(err)
	}
	if maxRunning.Load() != 1 {
		t.Errorf("sequential tools overlapped: %d at once", maxRunning.Load())
	}
}

func TestInvalidArgsRetryThenSuccess(t *testing.T) {
	t.Parallel()
	var got []int
	double := tool.Func("double", "", func(_ context.Context, _ *tool.RunContext, a xArgs) (int, error) {
		got = append(got, a.X)
		return a.X * 2, nil
	})
	m := turns(
		calls(call("double", "c1", `{"x":"not a number"}`)),
		calls(call("double", "c2", `{"x":21}`)),
		text("42"),
	)
	res, err := newAgent(t, m, double).Run(t.Context(), "double 21", nil)
	if err != nil {
		t.Fatal(err)
	}
	retry, ok := lastRequestParts(t, m, 1)[0].(message.RetryPrompt)
	if !ok || retry.ToolCallID != "c1" || !strings.Contains(retry.ModelText(), "Fix the errors and try again.") {
		t.Fatalf("want a retry prompt for c1, got %+v", lastRequestParts(t, m, 1))
	}
	if len(got) != 1 || got[0] != 21 {
		t.Errorf("tool ran with %v, want [21]", got)
	}
	if res.Usage.ToolCalls != 1 {
		t.Errorf("tool_calls = %d, want 1 (failed validations are not counted)", res.Usage.ToolCalls)
	}
}

func TestRetryExhaustion(t *testing.T) {
	t.Parallel()
	broken := tool.Func("broken", "", func(context.Context, *tool.RunContext, struct{}) (string, error) {
		return "", tool.Retry("try again")
	})
	m := model(func(n int, _ *llm.Request) *llm.Response { return calls(call("broken", "c", "{}")) })
	_, err := newAgent(t, m, broken).Run(t.Context(), "go", nil)
	var umb *agent.UnexpectedModelBehavior
	if !errors.As(err, &umb) || !strings.HasPrefix(err.Error(), "Tool 'broken' exceeded max retries count of 1.") {
		t.Fatalf("err = %v", err)
	}
	if n := len(m.Requests()); n != 2 {
		t.Errorf("model called %d times, want 2 (one retry)", n)
	}

	zero := tool.Func("broken", "", func(context.Context, *tool.RunContext, struct{}) (string, error) {
		return "", tool.Retry("again")
	}, tool.Retries(0))
	_, err = newAgent(t, turns(calls(call("broken", "c", "{}"))), zero).Run(t.Context(), "go", nil)
	if err == nil || !strings.HasPrefix(err.Error(), "Tool 'broken' exceeded max retries count of 0.") {
		t.Fatalf("retries=0: err = %v", err)
	}
}

func TestToolFailedDoesNotConsumeRetries(t *testing.T) {
	t.Parallel()
	n := 0
	flaky := tool.Func("flaky", "", func(context.Context, *tool.RunContext, struct{}) (string, error) {
		n++
		return "", tool.Fail("disk full")
	}, tool.Retries(0))
	m := turns(calls(call("flaky", "c1", "{}")), calls(call("flaky", "c2", "{}")), text("gave up"))
	res, err := newAgent(t, m, flaky).Run(t.Context(), "go", nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := returnContent(t, lastRequestParts(t, m, 1)[0]); got != `{"error":"disk full"}` {
		t.Errorf("failed return = %s", got)
	}
	if res.Output != "gave up" || n != 2 || res.Usage.ToolCalls != 0 {
		t.Errorf("output %q, runs %d, usage %+v", res.Output, n, res.Usage)
	}
}

type quotaError struct{ msg string }

func (e *quotaError) Error() string { return e.msg }

func TestUnexpectedToolErrorShowsOnlyType(t *testing.T) {
	t.Parallel()
	bad := tool.Func("bad", "", func(context.Context, *tool.RunContext, struct{}) (string, error) {
		return "", &quotaError{"secret account 1234 over quota"}
	})
	m := turns(calls(call("bad", "c1", "{}")), text("sorry"))
	if _, err := newAgent(t, m, bad).Run(t.Context(), "go", nil); err != nil {
		t.Fatal(err)
	}
	got := returnContent(t, lastRequestParts(t, m, 1)[0])
	if got != `{"error":"quotaError"}` {
		t.Errorf("model saw %s", got)
	}

	a := newAgentCfg(t, agent.Config{Model: turns(calls(call("bad", "c1", "{}"))), FailOnToolError: true}, bad)
	_, err := a.Run(t.Context(), "go", nil)
	var qe *quotaError
	if !errors.As(err, &qe) {
		t.Fatalf("FailOnToolError: err = %v", err)
	}
}

func TestUnknownToolIsRetried(t *testing.T) {
	t.Parallel()
	ok := tool.Func("ok", "", func(context.Context, *tool.RunContext, struct{}) (string, error) { return "fine", nil })
	m := turns(calls(call("nope", "c1", "{}")), calls(call("ok", "c2", "{}")), text("done"))
	if _, err := newAgent(t, m, ok).Run(t.Context(), "go", nil); err != nil {
		t.Fatal(err)
	}
	retry := lastRequestParts(t, m, 1)[0].(message.RetryPrompt)
	if retry.Content != "Unknown tool name: 'nope'. Available tools: 'ok'" {
		t.Errorf("retry = %q", retry.Content)
	}
}

func TestToolCallsLimit(t *testing.T) {
	t.Parallel()
	var ran atomic.Int32
	tick := tool.Func("tick", "", func(context.Context, *tool.RunContext, struct{}) (string, error) {
		ran.Add(1)
		return "tock", nil
	})
	cases := []struct {
		name     string
		limit    int
		batches  []int // calls per model turn
		wantErr  string
		wantRuns int32
	}{
		// Scenario: test_tool_call_limit (limit 0 refuses the first call)
		{"zero", 0, []int{1}, "The next tool call(s) would exceed the tool_calls_limit of 0 (tool_calls=1).", 0},
		// Scenario: test_tool_call_limit (limit 1 passes one call)
		{"exact", 1, []int{1}, "", 1},
		// Scenario: test_parallel_tool_calls_limit_enforced (5 ran, then a batch of 3 is refused whole)
		{"batch", 6, []int{5, 3}, "The next tool call(s) would exceed the tool_calls_limit of 6 (tool_calls=8).", 5},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ran.Store(0)
			var rs []*llm.Response
			id := 0
			for _, n := range tc.batches {
				var cs []message.ToolCall
				for range n {
					id++
					cs = append(cs, call("tick", "c"+string(rune('a'+id)), "{}"))
				}
				rs = append(rs, calls(cs...))
			}
			rs = append(rs, text("done"))
			a := newAgentCfg(t, agent.Config{Model: turns(rs...), Limits: agent.UsageLimits{ToolCalls: agent.Limit(tc.limit)}}, tick)
			res, err := a.Run(t.Context(), "go", nil)
			if tc.wantErr == "" {
				if err != nil || res.Usage.ToolCalls != tc.limit {
					t.Fatalf("err %v usage %+v", err, res)
				}
			} else {
				var ule *agent.UsageLimitExceeded
				if !errors.As(err, &ule) || !strings.HasPrefix(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
			}
			if got := ran.Load(); got != tc.wantRuns {
				t.Errorf("tool ran %d times, want %d", got, tc.wantRuns)
			}
		})
	}
}

func TestRequestLimit(t *testing.T) {
	t.Parallel()
	loop := tool.Func("loop", "", func(context.Context, *tool.RunContext, struct{}) (string, error) { return "again", nil })
	m := model(func(n int, _ *llm.Request) *llm.Response { return calls(call("loop", "c", "{}")) })
	a := newAgentCfg(t, agent.Config{Model: m, Limits: agent.UsageLimits{Requests: agent.Limit(3)}}, loop)
	_, err := a.Run(t.Context(), "go", nil)
	var ule *agent.UsageLimitExceeded
	if !errors.As(err, &ule) || ule.Limit != "request_limit" || !strings.HasPrefix(err.Error(), "The next request would exceed the request_limit of 3.") {
		t.Fatalf("err = %v", err)
	}
	if n := len(m.Requests()); n != 3 {
		t.Errorf("model called %d times, want 3", n)
	}
	// The default is 50.
	m = model(func(n int, _ *llm.Request) *llm.Response { return calls(call("loop", "c", "{}")) })
	if _, err := newAgent(t, m, loop).Run(t.Context(), "go", nil); !errors.As(err, &ule) || ule.Max != 50 {
		t.Fatalf("default limit: %v", err)
	}
}

func TestEnqueueAtNextBoundaryAndAtEnd(t *testing.T) {
	t.Parallel()
	notify := tool.Func("notify", "", func(_ context.Context, rc *tool.RunContext, _ struct{}) (string, error) {
		if err := rc.Enqueue(tool.PriorityASAP, message.TextContent("asap note")); err != nil {
			return "", err
		}
		return "sent", rc.Enqueue(tool.PriorityWhenIdle, message.TextContent("idle note"))
	})
	m := turns(calls(call("notify", "c1", "{}")), text("first answer"), text("final answer"))
	res, err := newAgent(t, m, notify).Run(t.Context(), "go", nil)
	if err != nil {
		t.Fatal(err)
	}
	// Request 1 carries the tool return, then the asap note as its own request.
	msgs := res.Messages
	var kinds []string
	for _, msg := range msgs {
		for _, p := range msg.Parts {
			s := p.PartKind()
			if u, ok := p.(message.UserPrompt); ok {
				s += ":" + u.Content[0].Text
			}
			kinds = append(kinds, string(msg.Role)+"/"+s)
		}
	}
	want := "request/user-prompt:go,response/tool-call,request/tool-return,request/user-prompt:asap note,response/text,request/user-prompt:idle note,response/text"
	if got := strings.Join(kinds, ","); got != want {
		t.Errorf("history\n got %s\nwant %s", got, want)
	}
	if res.Output != "final answer" || res.Usage.Requests != 3 {
		t.Errorf("output %q usage %+v", res.Output, res.Usage)
	}
	if err := (&tool.RunContext{}).Enqueue(tool.PriorityASAP, message.TextContent("x")); !errors.Is(err, tool.ErrNoRun) {
		t.Errorf("enqueue without run: %v", err)
	}
}

func TestCancelEndsRun(t *testing.T) {
	t.Parallel()
	stopper := tool.Func("stopper", "", func(ctx context.Context, rc *tool.RunContext, _ struct{}) (string, error) {
		rc.Cancel()
		<-ctx.Done()
		return "", ctx.Err()
	})
	sibling := tool.Func("sibling", "", func(ctx context.Context, _ *tool.RunContext, _ struct{}) (string, error) {
		<-ctx.Done()
		return "", ctx.Err()
	})
	m := turns(calls(call("stopper", "c1", "{}"), call("sibling", "c2", "{}")), text("never"))
	var final *agent.Final
	_, err := newAgent(t, m, stopper, sibling).Run(t.Context(), "go", &agent.RunOptions{OnEvent: func(e agent.Event) {
		if e.Type == agent.EventFinal {
			final = e.Final
		}
	}})
	if !errors.Is(err, agent.ErrRunCancelled) || err.Error() != "The agent run was cancelled." {
		t.Fatalf("err = %v", err)
	}
	if final == nil || final.Status != agent.StatusFailed {
		t.Errorf("final = %+v", final)
	}
}

func TestInterruptIsReportedAndHistoryClosed(t *testing.T) {
	t.Parallel()
	started := make(chan struct{})
	block := tool.Func("block", "", func(ctx context.Context, _ *tool.RunContext, _ struct{}) (string, error) {
		close(started)
		<-ctx.Done()
		return "", ctx.Err()
	})
	ctx, cancel := context.WithCancel(t.Context())
	go func() { <-started; cancel() }()
	var final *agent.Final
	res, err := newAgent(t, turns(calls(call("block", "c1", "{}"))), block).Run(ctx, "go", &agent.RunOptions{OnEvent: func(e agent.Event) {
		if e.Type == agent.EventFinal {
			final = e.Final
		}
	}})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v", err)
	}
	if final.Status != agent.StatusInterrupted {
		t.Errorf("final = %+v", final)
	}
	last := res.Messages[len(res.Messages)-1]
	if r, ok := last.Parts[0].(message.ToolReturn); !ok || r.Outcome != message.OutcomeCancelled || r.ModelText() != message.CancelledText {
		t.Errorf("dangling call not closed: %+v", last)
	}
}

func TestEventsInOrder(t *testing.T) {
	t.Parallel()
	echo := tool.Func("echo", "", func(_ context.Context, _ *tool.RunContext, a xArgs) (int, error) { return a.X, nil })
	m := turns(calls(call("echo", "c1", `{"x":7}`)), text("seven"))
	a := newAgentCfg(t, agent.Config{Model: m, Stream: true}, echo)
	seq, result := a.Iter(t.Context(), "go", nil)
	var types []string
	var runID string
	for e := range seq {
		types = append(types, string(e.Type))
		if runID == "" {
			runID = e.RunID
		}
		if e.RunID != runID || e.ConversationID == "" || e.At.IsZero() {
			t.Errorf("event %s lacks ids: %+v", e.Type, e)
		}
	}
	want := "run_started,model_request_started,tool_call,tool_result,model_request_started,text_delta,final"
	if got := strings.Join(types, ","); got != want {
		t.Errorf("events\n got %s\nwant %s", got, want)
	}
	res, err := result()
	if err != nil || res.Output != "seven" || res.RunID != runID {
		t.Fatalf("result %+v err %v", res, err)
	}
}

func TestRunIDFreshConversationIDCarried(t *testing.T) {
	t.Parallel()
	a := newAgent(t, turns(text("one"), text("two")))
	r1, err := a.Run(t.Context(), "first", nil)
	if err != nil {
		t.Fatal(err)
	}
	r2, err := a.Run(t.Context(), "second", &agent.RunOptions{History: r1.Messages})
	if err != nil {
		t.Fatal(err)
	}
	if r1.RunID == r2.RunID || r1.ConversationID != r2.ConversationID {
		t.Fatalf("run ids %s %s conv %s %s", r1.RunID, r2.RunID, r1.ConversationID, r2.ConversationID)
	}
	for _, m := range r2.NewMessages() {
		if m.RunID != r2.RunID {
			t.Errorf("new message with run id %s", m.RunID)
		}
	}
	if r2.Messages[0].RunID != r1.RunID {
		t.Errorf("old message restamped")
	}
}

func TestIterStopEarlyCancelsRun(t *testing.T) {
	t.Parallel()
	block := tool.Func("block", "", func(ctx context.Context, _ *tool.RunContext, _ struct{}) (string, error) {
		<-ctx.Done()
		return "", ctx.Err()
	})
	seq, result := newAgent(t, turns(calls(call("block", "c1", "{}"))), block).Iter(t.Context(), "go", nil)
	for e := range seq {
		if e.Type == agent.EventToolCall {
			break
		}
	}
	if _, err := result(); !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v", err)
	}
}

func TestLocalToolProgressEvents(t *testing.T) {
	t.Parallel()
	reporting := tool.Func("reporting", "", func(ctx context.Context, _ *tool.RunContext, _ struct{}) (string, error) {
		progress.Report(ctx, "working", progress.Fraction(0.25))
		return "ok", nil
	})
	var got []agent.Event
	_, err := newAgent(t, turns(calls(call("reporting", "c1", "{}")), text("done")), reporting).Run(t.Context(), "go", &agent.RunOptions{OnEvent: func(e agent.Event) {
		if e.Type == agent.EventProgress {
			got = append(got, e)
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].ToolCallID != "c1" || got[0].Tool != "reporting" || got[0].Message != "working" || *got[0].Fraction != 0.25 || got[0].TaskID != "" {
		t.Fatalf("progress events %+v", got)
	}
	b, _ := got[0].MarshalJSON()
	if !strings.Contains(string(b), `"type":"progress"`) || !strings.Contains(string(b), `"fraction":0.25`) {
		t.Errorf("json %s", b)
	}
}
