package agent_test

// Reproductions of the loop guarantees of issue 18: panics, cancellation at
// every boundary, pending calls in a continued history, the event stream's
// end, and histories that never repeat a side effect.

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/offload-dev/offload/internal/offloadtest"
	"github.com/offload-dev/offload/pkg/agent"
	"github.com/offload-dev/offload/pkg/deferred"
	"github.com/offload-dev/offload/pkg/llm"
	"github.com/offload-dev/offload/pkg/message"
	"github.com/offload-dev/offload/pkg/progress"
	"github.com/offload-dev/offload/pkg/tool"
)

func TestPanickingToolBecomesPanicOutcome(t *testing.T) {
	t.Parallel()
	boom := tool.Func("boom", "", func(context.Context, *tool.RunContext, struct{}) (string, error) {
		panic("kaboom")
	})
	ok := tool.Func("ok", "", func(context.Context, *tool.RunContext, struct{}) (string, error) { return "fine", nil })
	m := turns(calls(call("boom", "c1", "{}"), call("ok", "c2", "{}")), text("done"))
	var outcomes []string
	res, err := newAgent(t, m, boom, ok).Run(t.Context(), "go", &agent.RunOptions{OnEvent: func(e agent.Event) {
		if e.Type == agent.EventToolResult {
			outcomes = append(outcomes, e.Tool+"="+e.Outcome)
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	parts := lastRequestParts(t, m, 1)
	r := parts[0].(message.ToolReturn)
	if r.Outcome != message.OutcomeFailed || r.ModelText() != `{"error":"Panic"}` {
		t.Errorf("panic return = %+v (%s)", r, r.ModelText())
	}
	if returnContent(t, parts[1]) != "fine" {
		t.Errorf("sibling = %+v", parts[1])
	}
	if res.Output != "done" || len(outcomes) != 2 {
		t.Errorf("output %q outcomes %v", res.Output, outcomes)
	}
}

func TestPanickingToolWithFailOnToolErrorEndsRun(t *testing.T) {
	t.Parallel()
	boom := tool.Func("boom", "", func(context.Context, *tool.RunContext, struct{}) (string, error) { panic("kaboom") })
	m := turns(calls(call("boom", "c1", "{}")), text("never"))
	_, err := newAgentCfg(t, agent.Config{Model: m, FailOnToolError: true}, boom).Run(t.Context(), "go", nil)
	var p *agent.Panic
	if !errors.As(err, &p) || p.Value != "kaboom" || !strings.Contains(err.Error(), "kaboom") {
		t.Fatalf("err = %v", err)
	}
}

func TestPanickingArgsValidatorBecomesPanicOutcome(t *testing.T) {
	t.Parallel()
	v := tool.Func("v", "", func(context.Context, *tool.RunContext, struct{}) (string, error) { return "ran", nil },
		tool.Validate(func(context.Context, *tool.RunContext, struct{}) error { panic("in validator") }))
	m := turns(calls(call("v", "c1", "{}")), text("done"))
	if _, err := newAgent(t, m, v).Run(t.Context(), "go", nil); err != nil {
		t.Fatal(err)
	}
	if got := lastRequestParts(t, m, 1)[0].(message.ToolReturn).ModelText(); got != `{"error":"Panic"}` {
		t.Errorf("model saw %s", got)
	}
}

func TestNilReturnPointerIsNull(t *testing.T) {
	t.Parallel()
	nilret := tool.Func("nilret", "", func(context.Context, *tool.RunContext, struct{}) (*tool.Return, error) { return nil, nil })
	m := turns(calls(call("nilret", "c1", "{}")), text("done"))
	if _, err := newAgent(t, m, nilret).Run(t.Context(), "go", nil); err != nil {
		t.Fatal(err)
	}
	if r := lastRequestParts(t, m, 1)[0].(message.ToolReturn); r.Outcome != message.OutcomeSuccess || r.ModelText() != "" {
		t.Errorf("return = %+v", r)
	}
}

func TestCancelThenReturnDoesNotCallModelAgain(t *testing.T) {
	t.Parallel()
	stopper := tool.Func("stopper", "", func(_ context.Context, rc *tool.RunContext, _ struct{}) (string, error) {
		rc.Cancel()
		return "stopped", nil
	})
	m := turns(calls(call("stopper", "c1", "{}")), text("never"))
	res, err := newAgent(t, m, stopper).Run(t.Context(), "go", nil)
	if !errors.Is(err, agent.ErrRunCancelled) {
		t.Fatalf("err = %v", err)
	}
	if n := len(m.Requests()); n != 1 {
		t.Errorf("model called %d times after Cancel, want 1", n)
	}
	last := res.Messages[len(res.Messages)-1]
	if last.Role != message.RoleRequest || returnContent(t, last.Parts[0]) != "stopped" {
		t.Errorf("the tool's return is not recorded: %+v", last)
	}
}

func TestCancelStopsLaterSequentialTool(t *testing.T) {
	t.Parallel()
	stopper := tool.Func("stopper", "", func(_ context.Context, rc *tool.RunContext, _ struct{}) (string, error) {
		rc.Cancel()
		return "stopped", nil
	})
	var ran atomic.Bool
	seq := tool.Func("seq", "", func(context.Context, *tool.RunContext, struct{}) (string, error) {
		ran.Store(true)
		return "side effect", nil
	}, tool.Sequential())
	m := turns(calls(call("stopper", "c1", "{}"), call("seq", "c2", "{}")), text("never"))
	res, err := newAgent(t, m, stopper, seq).Run(t.Context(), "go", nil)
	if !errors.Is(err, agent.ErrRunCancelled) {
		t.Fatalf("err = %v", err)
	}
	if ran.Load() {
		t.Error("sequential tool started after Cancel()")
	}
	last := res.Messages[len(res.Messages)-1]
	if len(last.Parts) != 2 || last.Parts[1].(message.ToolReturn).Outcome != message.OutcomeCancelled {
		t.Errorf("history end = %+v", last)
	}
}

func TestInterruptStopsLaterSequentialTool(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	interrupter := tool.Func("interrupter", "", func(context.Context, *tool.RunContext, struct{}) (string, error) {
		cancel() // SIGINT arrives while this tool finishes
		return "done", nil
	})
	var ran atomic.Bool
	seq := tool.Func("seq", "", func(context.Context, *tool.RunContext, struct{}) (string, error) {
		ran.Store(true)
		return "side effect", nil
	}, tool.Sequential())
	m := turns(calls(call("interrupter", "c1", "{}"), call("seq", "c2", "{}")), text("never"))
	res, err := newAgent(t, m, interrupter, seq).Run(ctx, "go", nil)
	if !errors.Is(err, context.Canceled) || agent.StatusOf(res, err) != agent.StatusInterrupted {
		t.Fatalf("err = %v status %s", err, agent.StatusOf(res, err))
	}
	if ran.Load() {
		t.Error("sequential tool started after the run's context was cancelled")
	}
}

func TestCancelBeforePauseIsRunCancelled(t *testing.T) {
	t.Parallel()
	stopper := tool.Func("stopper", "", func(_ context.Context, rc *tool.RunContext, _ struct{}) (string, error) {
		rc.Cancel()
		return "stopped", nil
	})
	m := turns(calls(call("stopper", "c1", "{}"), call("gated", "c2", `{"x":1}`)), text("never"))
	var final *agent.Final
	res, err := allowDeferred(t, m, stopper, times42("gated", tool.NeedsApproval())).Run(t.Context(), "go", &agent.RunOptions{OnEvent: func(e agent.Event) {
		if e.Type == agent.EventFinal {
			final = e.Final
		}
	}})
	if !errors.Is(err, agent.ErrRunCancelled) || res.Paused() {
		t.Fatalf("err = %v paused %v", err, res.Paused())
	}
	if final.Status != agent.StatusFailed {
		t.Errorf("final = %+v", final)
	}
}

func TestInterruptBeforePauseIsInterrupted(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	interrupter := tool.Func("interrupter", "", func(context.Context, *tool.RunContext, struct{}) (string, error) {
		cancel()
		return "done", nil
	})
	m := turns(calls(call("interrupter", "c1", "{}"), call("gated", "c2", `{"x":1}`)), text("never"))
	var final *agent.Final
	_, err := allowDeferred(t, m, interrupter, times42("gated", tool.NeedsApproval())).Run(ctx, "go", &agent.RunOptions{OnEvent: func(e agent.Event) {
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
}

// pausedOnGated runs [tick a, gated b] to a pause and returns its result.
func pausedOnGated(t *testing.T, ticks *atomic.Int32) (*agent.Result, *fnModel, *agent.Agent) {
	t.Helper()
	tick := tool.Func("tick", "", func(context.Context, *tool.RunContext, struct{}) (string, error) {
		ticks.Add(1)
		return "ticked", nil
	})
	m := turns(calls(call("tick", "a", "{}"), call("gated", "b", `{"x":1}`)), text("done"))
	a := allowDeferred(t, m, tick, times42("gated", tool.NeedsApproval()))
	res, err := a.Run(t.Context(), "go", nil)
	if err != nil || !res.Paused() {
		t.Fatalf("first run: %v paused %v", err, res.Paused())
	}
	return res, m, a
}

func TestNewPromptOnPausedHistoryIsRefused(t *testing.T) {
	t.Parallel()
	var ticks atomic.Int32
	paused, m, a := pausedOnGated(t, &ticks)
	_, err := a.Run(t.Context(), "something else", &agent.RunOptions{History: paused.Messages})
	if !errors.Is(err, agent.ErrPendingCalls) {
		t.Fatalf("err = %v, want ErrPendingCalls", err)
	}
	if n := len(m.Requests()); n != 1 {
		t.Errorf("model called %d times, want 1", n)
	}
}

func TestNoPromptOnPausedHistoryKeepsPendingApproval(t *testing.T) {
	t.Parallel()
	var ticks atomic.Int32
	paused, m, a := pausedOnGated(t, &ticks)
	res, err := a.Run(t.Context(), "", &agent.RunOptions{History: paused.Messages})
	if err != nil {
		t.Fatal(err)
	}
	if !res.Paused() || len(res.Deferred.Approvals) != 1 || res.Deferred.Approvals[0].ToolCallID != "b" {
		t.Fatalf("pending approval dropped: %+v", res.Deferred)
	}
	if res.Deferred.TaskIDs["b"] != paused.Deferred.TaskIDs["b"] {
		t.Errorf("task id changed: %s → %s", paused.Deferred.TaskIDs["b"], res.Deferred.TaskIDs["b"])
	}
	if n := len(m.Requests()); n != 1 || ticks.Load() != 1 {
		t.Errorf("model called %d times, tick ran %d times", n, ticks.Load())
	}
	// The approval can still be given.
	final, err := a.Run(t.Context(), "", &agent.RunOptions{History: res.Messages, DeferredResults: &deferred.Results{Approvals: map[string]any{"b": true}}})
	if err != nil || final.Paused() || final.Output != "done" {
		t.Fatalf("resume: %v %+v", err, final)
	}
	if n := len(m.Requests()); n != 2 || ticks.Load() != 1 {
		t.Errorf("after the approval: model called %d times (want 2), tick ran %d times (want 1)", n, ticks.Load())
	}
}

// TestIterNeverDropsFinal cancels the caller's context while a tool runs;
// run it with -count=20: the drop was probabilistic.
func TestIterNeverDropsFinal(t *testing.T) {
	t.Parallel()
	for range 20 {
		block := tool.Func("block", "", func(ctx context.Context, _ *tool.RunContext, _ struct{}) (string, error) {
			<-ctx.Done()
			return "", ctx.Err()
		})
		ctx, cancel := context.WithCancel(t.Context())
		seq, result := newAgent(t, turns(calls(call("block", "c1", "{}"))), block).Iter(ctx, "go", nil)
		var last agent.Event
		for e := range seq {
			if e.Type == agent.EventToolCall {
				cancel()
			}
			last = e
		}
		cancel()
		if last.Type != agent.EventFinal || last.Final.Status != agent.StatusInterrupted {
			t.Fatalf("last event = %s %+v", last.Type, last.Final)
		}
		if _, err := result(); !errors.Is(err, context.Canceled) {
			t.Fatalf("err = %v", err)
		}
	}
}

// leakyReporter is a tool that leaves a goroutine reporting progress after
// it returned; release lets the goroutine report, done says it did.
func leakyReporter(release, done chan struct{}) *tool.Tool {
	return tool.Func("leaky", "", func(ctx context.Context, _ *tool.RunContext, _ struct{}) (string, error) {
		go func() {
			defer close(done)
			<-release
			progress.Report(ctx, "late", nil)
		}()
		return "ok", nil
	})
}

func TestNothingEmittedAfterFinal(t *testing.T) {
	t.Parallel()
	release, done := make(chan struct{}), make(chan struct{})
	m := turns(calls(call("leaky", "c1", "{}")), text("done"))
	var mu sync.Mutex
	var types []agent.EventType
	_, err := newAgent(t, m, leakyReporter(release, done)).Run(t.Context(), "go", &agent.RunOptions{OnEvent: func(e agent.Event) {
		mu.Lock()
		types = append(types, e.Type)
		mu.Unlock()
	}})
	if err != nil {
		t.Fatal(err)
	}
	close(release)
	offloadtest.WaitOrTimeout(t, done, "the leftover goroutine")
	mu.Lock()
	defer mu.Unlock()
	if types[len(types)-1] != agent.EventFinal {
		t.Fatalf("events after final: %v", types)
	}
}

func TestIterLateProgressDoesNotPanic(t *testing.T) {
	t.Parallel()
	release, done := make(chan struct{}), make(chan struct{})
	m := turns(calls(call("leaky", "c1", "{}")), text("done"))
	seq, result := newAgent(t, m, leakyReporter(release, done)).Iter(t.Context(), "go", nil)
	var last agent.Event
	for e := range seq {
		last = e
	}
	close(release)
	offloadtest.WaitOrTimeout(t, done, "the leftover goroutine")
	if _, err := result(); err != nil || last.Type != agent.EventFinal {
		t.Fatalf("err %v last %s", err, last.Type)
	}
}

func TestFailedStepRecordsToolsThatRan(t *testing.T) {
	t.Parallel()
	var sent atomic.Int32
	sentCh := make(chan struct{})
	sendEmail := tool.Func("send_email", "", func(context.Context, *tool.RunContext, struct{}) (string, error) {
		sent.Add(1)
		if sent.Load() == 1 {
			close(sentCh)
		}
		return "sent", nil
	})
	broken := tool.Func("broken", "", func(ctx context.Context, _ *tool.RunContext, _ struct{}) (string, error) {
		select {
		case <-sentCh:
		case <-ctx.Done():
		}
		return "", tool.Retry("again")
	}, tool.Retries(0))
	m := turns(calls(call("send_email", "c1", "{}"), call("broken", "c2", "{}")), text("continued"))
	a := newAgent(t, m, sendEmail, broken)
	res, err := a.Run(t.Context(), "go", nil)
	var umb *agent.UnexpectedModelBehavior
	if !errors.As(err, &umb) {
		t.Fatalf("err = %v", err)
	}
	last := res.Messages[len(res.Messages)-1]
	if last.Role != message.RoleRequest || len(last.Parts) != 2 {
		t.Fatalf("history end = %+v", last)
	}
	if r := last.Parts[0].(message.ToolReturn); r.Outcome != message.OutcomeSuccess || r.ModelText() != "sent" {
		t.Errorf("send_email return = %+v", r)
	}
	if r := last.Parts[1].(message.ToolReturn); r.Outcome != message.OutcomeCancelled {
		t.Errorf("broken return = %+v", r)
	}
	if _, err := a.Run(t.Context(), "go on", &agent.RunOptions{History: res.Messages}); err != nil {
		t.Fatal(err)
	}
	if sent.Load() != 1 {
		t.Errorf("send_email ran %d times", sent.Load())
	}
}

func TestEnqueueOnFinishedRunIsErrNoRun(t *testing.T) {
	t.Parallel()
	var saved *tool.RunContext
	keep := tool.Func("keep", "", func(_ context.Context, rc *tool.RunContext, _ struct{}) (string, error) {
		saved = rc
		return "ok", nil
	})
	if _, err := newAgent(t, turns(calls(call("keep", "c1", "{}")), text("done")), keep).Run(t.Context(), "go", nil); err != nil {
		t.Fatal(err)
	}
	if err := saved.Enqueue(tool.PriorityASAP, message.TextContent("late")); !errors.Is(err, tool.ErrNoRun) {
		t.Fatalf("Enqueue after the run = %v, want ErrNoRun", err)
	}
}

func TestEnqueuedInPausingStepIsKept(t *testing.T) {
	t.Parallel()
	note := tool.Func("note", "", func(_ context.Context, rc *tool.RunContext, _ struct{}) (string, error) {
		return "noted", rc.Enqueue(tool.PriorityASAP, message.TextContent("remember this"))
	})
	m := turns(calls(call("note", "c1", "{}"), call("gated", "c2", `{"x":1}`)), text("done"))
	a := allowDeferred(t, m, note, times42("gated", tool.NeedsApproval()))
	res, err := a.Run(t.Context(), "go", nil)
	if err != nil || !res.Paused() {
		t.Fatalf("%v paused %v", err, res.Paused())
	}
	res2, err := a.Run(t.Context(), "", &agent.RunOptions{History: res.Messages, DeferredResults: &deferred.Results{Approvals: map[string]any{"c2": true}}})
	if err != nil || res2.Output != "done" {
		t.Fatalf("resume: %v %+v", err, res2)
	}
	wantRequests(t, m, 2)
	found := false
	for _, msg := range m.Requests()[1].Messages {
		for _, p := range msg.Parts {
			if u, ok := p.(message.UserPrompt); ok && len(u.Content) == 1 && u.Content[0].Text == "remember this" {
				found = true
			}
		}
	}
	if !found {
		t.Error("message enqueued in the pausing step never reached the model")
	}
}

func TestDanglingCallInMiddleOfHistoryIsRepaired(t *testing.T) {
	t.Parallel()
	h := message.History{
		message.NewRequest(message.UserText("hi")),
		message.NewResponse(call("gone", "c1", "{}")),
		message.NewRequest(message.UserText("next")),
		message.NewResponse(message.Text{Content: "ok"}),
	}
	m := turns(text("done"))
	if _, err := newAgent(t, m).Run(t.Context(), "again", &agent.RunOptions{History: h}); err != nil {
		t.Fatal(err)
	}
	msgs := m.Requests()[0].Messages
	r, ok := msgs[2].Parts[0].(message.ToolReturn)
	if !ok || r.ToolCallID != "c1" || r.Outcome != message.OutcomeCancelled {
		t.Fatalf("dangling call not repaired: %+v", msgs[2])
	}
	if len(h[2].Parts) != 1 {
		t.Error("the caller's history was changed")
	}
}

func TestTwoTokenLimitsGiveOneError(t *testing.T) {
	t.Parallel()
	m := model(func(int, *llm.Request) *llm.Response {
		r := text("big")
		r.Usage = message.Usage{InputTokens: 10, OutputTokens: 10}
		return r
	})
	_, err := newAgentCfg(t, agent.Config{Model: m, Limits: agent.UsageLimits{InputTokens: agent.Limit(5), OutputTokens: agent.Limit(5)}}).Run(t.Context(), "go", nil)
	var ule *agent.UsageLimitExceeded
	if !errors.As(err, &ule) || ule.Limit != "input_tokens_limit" || strings.Contains(err.Error(), "\n") {
		t.Fatalf("err = %q", err)
	}
}

// expiring is a context whose deadline passes when expire is called: a
// deadline without a clock.
type expiring struct {
	context.Context
	done chan struct{}
	once sync.Once
}

func newExpiring(parent context.Context) *expiring {
	return &expiring{Context: parent, done: make(chan struct{})}
}

func (c *expiring) expire()                     { c.once.Do(func() { close(c.done) }) }
func (c *expiring) Done() <-chan struct{}       { return c.done }
func (c *expiring) Deadline() (time.Time, bool) { return time.Time{}, false }

func (c *expiring) Err() error {
	select {
	case <-c.done:
		return context.DeadlineExceeded
	default:
		return nil
	}
}

// A call stopped by the run's deadline is a cancelled call, as one stopped
// by an interrupt: not a failure of the tool shown to the model.
func TestDeadlineStopsACallAsCancelled(t *testing.T) {
	t.Parallel()
	ctx := newExpiring(t.Context())
	slow := tool.Func("slow", "", func(tctx context.Context, _ *tool.RunContext, _ struct{}) (string, error) {
		ctx.expire() // the run's deadline passes while the tool works
		<-tctx.Done()
		return "", tctx.Err()
	})
	m := turns(calls(call("slow", "c1", "{}")), text("never"))
	res, err := newAgent(t, m, slow).Run(ctx, "go", nil)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v", err)
	}
	last := res.Messages[len(res.Messages)-1]
	if r, ok := last.Parts[0].(message.ToolReturn); !ok || r.Outcome != message.OutcomeCancelled {
		t.Errorf("the call's return = %+v, want outcome cancelled", last.Parts[0])
	}
}

// panicky is a tool result whose JSON encoding panics.
type panicky struct{}

func (panicky) MarshalJSON() ([]byte, error) { panic("in MarshalJSON") }

// A tool whose result panics while it is encoded is a panicking tool: a
// Panic outcome, and the process survives.
func TestPanickingResultEncodingBecomesPanicOutcome(t *testing.T) {
	t.Parallel()
	bad := tool.Func("bad", "", func(context.Context, *tool.RunContext, struct{}) (panicky, error) { return panicky{}, nil })
	m := turns(calls(call("bad", "c1", "{}")), text("done"))
	res, err := newAgent(t, m, bad).Run(t.Context(), "go", nil)
	if err != nil || res.Output != "done" {
		t.Fatalf("%v %+v", err, res)
	}
	if got := lastRequestParts(t, m, 1)[0].(message.ToolReturn).ModelText(); got != `{"error":"Panic"}` {
		t.Errorf("model saw %s", got)
	}
}

// addNote is a ToolCallWrapper that adds a note to every result, the way a
// capability post-processing results might.
type addNote struct{}

func (addNote) WrapToolCall(ctx context.Context, c *agent.ToolCall, next agent.ToolCallFunc) (any, error) {
	v, err := next(ctx, c)
	return tool.Return{Value: v, Content: []message.Content{message.TextContent("note")}}, err
}

// A tool.Return whose value is itself a tool.Return (a wrapper wrapping a
// tool's tool.Return) is refused, as the reference refuses a nested
// ToolReturn: encoding it would send the inner one's application-only
// metadata to the model.
func TestNestedToolReturnDoesNotLeakMetadata(t *testing.T) {
	t.Parallel()
	secret := tool.Func("secret", "", func(context.Context, *tool.RunContext, struct{}) (tool.Return, error) {
		return tool.Return{Value: "public", Metadata: map[string]any{"internal": "s3cret"}}, nil
	})
	m := turns(calls(call("secret", "c1", "{}")), text("done"))
	res, err := newAgentCfg(t, agent.Config{Model: m, Capabilities: []agent.Capability{addNote{}}}, secret).Run(t.Context(), "go", nil)
	if err != nil || res.Output != "done" {
		t.Fatalf("%v %+v", err, res)
	}
	if got := mustJSON(t, m.Requests()[1].Messages); strings.Contains(got, "s3cret") {
		t.Errorf("application metadata reached the model: %s", got)
	}
}

// An args validator stopped by an interrupt is not a failure of the tool:
// the call gets a cancelled return, as a tool stopped by it does.
func TestInterruptedValidatorLeavesACancelledCall(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	checked := tool.Func("checked", "", func(context.Context, *tool.RunContext, struct{}) (string, error) { return "ran", nil },
		tool.Validate(func(vctx context.Context, _ *tool.RunContext, _ struct{}) error {
			cancel() // SIGINT while the validator asks a remote service
			<-vctx.Done()
			return vctx.Err()
		}))
	m := turns(calls(call("checked", "c1", "{}")), text("never"))
	res, err := newAgent(t, m, checked).Run(ctx, "go", nil)
	if !errors.Is(err, context.Canceled) || agent.StatusOf(res, err) != agent.StatusInterrupted {
		t.Fatalf("err = %v", err)
	}
	last := res.Messages[len(res.Messages)-1]
	if r, ok := last.Parts[0].(message.ToolReturn); !ok || r.Outcome != message.OutcomeCancelled {
		t.Errorf("the call's return = %+v, want outcome cancelled", last.Parts[0])
	}
}
