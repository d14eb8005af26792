package bgtest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/offload-dev/offload/pkg/agent"
	"github.com/offload-dev/offload/pkg/deferred"
	"github.com/offload-dev/offload/pkg/llm"
	"github.com/offload-dev/offload/pkg/message"
	"github.com/offload-dev/offload/pkg/progress"
	"github.com/offload-dev/offload/pkg/tool"
)

var scenarios = []scenario{
	{"AcksThenDeliversResultAsFollowUp", acksThenDelivers},
	{"ToolSignalledErrorsHaveReadableFollowUps", signalledErrors},
	{"RetryExhaustionTerminatesRun", retryExhaustion},
	{"CompletedCallIsCountedOnce", countedOnce},
	{"PendingCallCountsTowardToolCallLimit", pendingCountsTowardLimit},
	{"SequentialToolStaysInline", sequentialStaysInline},
	{"UnexpectedErrorShowsOnlyItsType", unexpectedError},
	{"IterDeliversLikeRun", iterDelivers},
	{"UnmarkedToolRunsNormally", unmarkedRunsNormally},
	{"ToolCanEnqueueFromItsGoroutine", enqueueFromTask},
	{"CapabilitiesCombineWithoutDoubleExecution", combineCapabilities},
	{"ContextCancelFromToolStopsTheRun", cancelFromTool},
	{"ToolReturnKeepsFilesWithoutMetadata", toolReturnFiles},
	{"ToolReturnKeepsStringContent", toolReturnStrings},
	{"StructuredReturnValueIsCompactJSON", structuredReturn},
	{"InstructionsMentionFollowUpDelivery", instructions},
	{"ConcurrentRunsDoNotShareTasks", concurrentRuns},
	{"PauseIsNotHeldBehindLiveTasks", pauseNotHeld},
	{"PauseWinsOverCompletedResult", pauseWinsOverCompleted},
	{"QueuedResultNotDelayedByUnrelatedLiveTask", queuedNotDelayed},
	{"FailedTaskDoesNotCancelItsSibling", failedKeepsSibling},
	{"ToolsOwnCancellationEndsTheRun", ownCancellation},
	{"PanicIsAFailedOutcome", panicOutcome},
	{"EndedRunReleasesReservedToolCalls", releasesReservation},
	{"FatalOutcomeAtPauseIsRaised", fatalAtPause},
	{"AbortWaitsForCancellationCleanup", abortWaitsCleanup},
	{"AbortWaitsForToolIgnoringCancellation", abortWaitsStubborn},
	{"InterruptCancelsLiveTasks", interruptCancels},
	{"OnlyOptionalToolsAdvertiseFlag", onlyOptionalAdvertise},
	{"ModelOptingInRunsInBackground", optingIn},
	{"ModelOmittingFlagRunsInline", omittingFlag},
	{"SelectorWinsOverOptionalMetadata", selectorWins},
	{"ExistingFlagParameterIsRejected", existingFlagRejected},
	{"InvalidArgsOfOptionalToolAreRetried", invalidArgsRetried},
	{"SlowCallsDoNotHoldBackQuickOnes", acceptance},
	{"SuspendDetachesOrCancelsLiveTasks", suspend},
	{"EventsNameTheTask", eventsNameTheTask},
}

// untilFollowUps answers first, then "done" once req carries k follow-ups
// ("waiting" before).
func untilFollowUps(k int, first *llm.Response) turnFunc {
	return func(n int, req *llm.Request) *llm.Response {
		switch {
		case n == 0:
			return first
		case len(followUps(req)) >= k:
			return text("done")
		default:
			return text("waiting")
		}
	}
}

// Scenario: test_metadata_marked_tool_acks_then_delivers_result_as_follow_up
func acksThenDelivers(t *testing.T, h Harness) {
	gate := make(chan struct{})
	release := closer(gate)
	t.Cleanup(release)
	m, rec := newModel(func(n int, req *llm.Request) *llm.Response {
		switch n {
		case 0:
			return calls(call("slow_research", "c1", "{}"))
		case 1:
			release() // the run is still open while the tool was blocked
			return text("waiting")
		default:
			return text("done")
		}
	})
	a := newAgent(t, h, m, setup{}, gated("slow_research", "researched topic", gate, nil, bg()))
	res, err := a.Run(runCtx(t), "research", nil)
	if err != nil {
		t.Fatal(err)
	}
	reqs := rec.requests()
	if len(reqs) != 3 || res.Output != "done" {
		t.Fatalf("%d requests, output %q", len(reqs), res.Output)
	}
	id := acks(reqs[1])["c1"]
	if id == "" {
		t.Fatalf("no acknowledgement: %v", toolReturns(reqs[1]))
	}
	if fu := followUpTexts(reqs[1]); len(fu) != 0 {
		t.Errorf("follow-up before the tool finished: %q", fu)
	}
	want := fmt.Sprintf("Background tool 'slow_research' (task %s) completed.\nResult: researched topic", id)
	if fu := followUpTexts(reqs[2]); len(fu) != 1 || fu[0] != want {
		t.Errorf("follow-ups = %q, want [%q]", fu, want)
	}
}

// Scenario: test_tool_signalled_errors_have_readable_follow_ups
func signalledErrors(t *testing.T, h Harness) {
	cases := []struct {
		name, want string
		err        error
	}{
		{"retry", "try later", tool.Retry("try later")},
		{"tool-failed", "no access", tool.Fail("no access")},
		{"deferred", "CallDeferred was raised; background tools cannot defer a running task.", &tool.CallDeferred{Metadata: map[string]any{"secret": "s3cr3t"}}},
		{"empty-retry", "ModelRetry", tool.Retry("")},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			failing := tool.Func("flaky", "", func(context.Context, *tool.RunContext, struct{}) (string, error) { return "", c.err }, bg())
			m, rec := newModel(untilFollowUps(1, calls(call("flaky", "c1", "{}"))))
			res, err := newAgent(t, h, m, setup{}, failing).Run(runCtx(t), "go", nil)
			if err != nil || res.Output != "done" {
				t.Fatalf("%v output %q", err, res.Output)
			}
			reqs := rec.requests()
			last := reqs[len(reqs)-1]
			id := acks(last)["c1"]
			want := fmt.Sprintf("Background tool 'flaky' (task %s) failed: %s", id, c.want)
			if fu := followUpTexts(last); len(fu) != 1 || fu[0] != want {
				t.Errorf("follow-ups = %q, want [%q]", fu, want)
			}
			b, _ := json.Marshal(last.Messages)
			if bytes.Contains(b, []byte("s3cr3t")) {
				t.Error("deferral metadata leaked to the model")
			}
		})
	}
}

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
			wait(t, first, "the first call to start")
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

// Scenario: test_sequential_tool_stays_on_normal_execution_path
func sequentialStaysInline(t *testing.T, h Harness) {
	if h.Remote {
		t.Skip("remote tools do not carry Sequential: the registry (SPEC §5.4) has no such field")
	}
	var running atomic.Int32
	var overlapped atomic.Bool
	body := func(result string) func(context.Context, *tool.RunContext, struct{}) (string, error) {
		return func(context.Context, *tool.RunContext, struct{}) (string, error) {
			if running.Add(1) > 1 {
				overlapped.Store(true)
			}
			defer running.Add(-1)
			return result, nil
		}
	}
	seq := tool.Func("seq", "", body("seq result"), bg(), tool.Sequential())
	later := tool.Func("later", "", body("later result"), bg())
	m, rec := newModel(func(n int, req *llm.Request) *llm.Response {
		switch {
		case n == 0:
			return calls(call("seq", "c1", "{}"))
		case n == 1:
			return calls(call("later", "c2", "{}"))
		case len(followUps(req)) >= 1:
			return text("done")
		default:
			return text("waiting")
		}
	})
	if _, err := newAgent(t, h, m, setup{}, seq, later).Run(runCtx(t), "go", nil); err != nil {
		t.Fatal(err)
	}
	if got := toolReturns(rec.requests()[1])["c1"]; got != "seq result" {
		t.Errorf("sequential tool returned %q, want its real result", got)
	}
	if overlapped.Load() {
		t.Error("the sequential tool overlapped the background one")
	}
}

// Scenario: test_unexpected_error_is_logged_without_exposing_details_to_model
func unexpectedError(t *testing.T, h Harness) {
	var logs bytes.Buffer
	var mu sync.Mutex
	logger := slog.New(slog.NewTextHandler(&lockedWriter{w: &logs, mu: &mu}, nil))
	boom := tool.Func("boom", "", func(context.Context, *tool.RunContext, struct{}) (string, error) {
		return "", errors.New("secret detail")
	}, bg())
	m, rec := newModel(untilFollowUps(1, calls(call("boom", "c1", "{}"))))
	if _, err := newAgent(t, h, m, setup{cfg: agent.Config{Logger: logger}}, boom).Run(runCtx(t), "go", nil); err != nil {
		t.Fatal(err)
	}
	reqs := rec.requests()
	last := reqs[len(reqs)-1]
	fu := followUpTexts(last)
	if len(fu) != 1 || !strings.HasSuffix(fu[0], ") failed: errorString") {
		t.Errorf("follow-ups = %q", fu)
	}
	b, _ := json.Marshal(last.Messages)
	if bytes.Contains(b, []byte("secret detail")) {
		t.Error("the error's message reached the model")
	}
	if !h.Remote {
		mu.Lock()
		defer mu.Unlock()
		if !strings.Contains(logs.String(), "secret detail") {
			t.Errorf("the error's message was not logged: %s", logs.String())
		}
	}
}

type lockedWriter struct {
	w  *bytes.Buffer
	mu *sync.Mutex
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// Scenario: test_run_stream_waits_for_live_task_then_drops_its_result
// (Go has no run_stream: the event iterator waits for the live task like
// Run and, unlike run_stream, delivers its result.)
func iterDelivers(t *testing.T, h Harness) {
	gate := make(chan struct{})
	release := closer(gate)
	t.Cleanup(release)
	m, rec := newModel(func(n int, req *llm.Request) *llm.Response {
		switch {
		case n == 0:
			return calls(call("slow", "c1", "{}"))
		case len(followUps(req)) > 0:
			return text("done")
		default:
			release()
			return text("waiting")
		}
	})
	seq, result := newAgent(t, h, m, setup{}, gated("slow", "slow result", gate, nil, bg())).Iter(runCtx(t), "go", nil)
	var last agent.Event
	for e := range seq {
		last = e
	}
	res, err := result()
	if err != nil || res.Output != "done" || last.Type != agent.EventFinal {
		t.Fatalf("%v output %q last %s", err, res.Output, last.Type)
	}
	if rec.count() != 3 {
		t.Errorf("%d model requests, want 3", rec.count())
	}
}

// Scenario: test_unmarked_tool_runs_normally
func unmarkedRunsNormally(t *testing.T, h Harness) {
	plain := tool.Func("plain", "", func(context.Context, *tool.RunContext, struct{}) (string, error) { return "plain result", nil })
	m, rec := newModel(func(n int, _ *llm.Request) *llm.Response {
		if n == 0 {
			return calls(call("plain", "c1", "{}"))
		}
		return text("done")
	})
	var ev events
	if _, err := newAgent(t, h, m, setup{}, plain).Run(runCtx(t), "go", &agent.RunOptions{OnEvent: ev.add}); err != nil {
		t.Fatal(err)
	}
	req := rec.requests()[1]
	if got := toolReturns(req)["c1"]; got != "plain result" {
		t.Errorf("return = %q", got)
	}
	if len(acks(req)) != 0 || len(followUps(req)) != 0 || len(ev.ofType(agent.EventBackgroundTaskStarted)) != 0 {
		t.Error("an unmarked tool ran in the background")
	}
}

// Scenario: test_sync_tool_can_enqueue_from_its_worker_thread
func enqueueFromTask(t *testing.T, h Harness) {
	if h.Remote {
		t.Skip("a remote tool's RunContext is not bound to the agent's run: it cannot Enqueue")
	}
	noter := tool.Func("noter", "", func(_ context.Context, rc *tool.RunContext, _ struct{}) (string, error) {
		return "noted", rc.Enqueue(tool.PriorityASAP, message.TextContent("note from the task"))
	}, bg())
	m, rec := newModel(untilFollowUps(1, calls(call("noter", "c1", "{}"))))
	if _, err := newAgent(t, h, m, setup{}, noter).Run(runCtx(t), "go", nil); err != nil {
		t.Fatal(err)
	}
	reqs := rec.requests()
	found := false
	for _, msg := range reqs[len(reqs)-1].Messages {
		for _, p := range msg.Parts {
			if u, ok := p.(message.UserPrompt); ok && u.Content[0].Text == "note from the task" {
				found = true
			}
		}
	}
	if !found {
		t.Error("the enqueued message never reached the model")
	}
}

// Scenario: test_multiple_capabilities_combine_selectors_without_double_execution
func combineCapabilities(t *testing.T, h Harness) {
	var mu sync.Mutex
	counts := map[string]int{}
	counted := func(name string, opts ...tool.Option) *tool.Tool {
		return tool.Func(name, "", func(context.Context, *tool.RunContext, struct{}) (string, error) {
			mu.Lock()
			counts[name]++
			mu.Unlock()
			return name + " ok", nil
		}, opts...)
	}
	m, rec := newModel(untilFollowUps(3, calls(call("first", "c1", "{}"), call("shared", "c2", "{}"), call("second", "c3", "{}"), call("plain", "c4", "{}"))))
	caps := func(exec agent.Executor) []agent.Capability {
		return []agent.Capability{
			agent.BackgroundTools(agent.BackgroundConfig{Tools: agent.SelectNames("first", "shared"), Executor: exec}),
			agent.BackgroundTools(agent.BackgroundConfig{Tools: agent.SelectNames("shared", "second"), Executor: exec}),
		}
	}
	if _, err := newAgent(t, h, m, setup{caps: caps}, counted("first"), counted("shared"), counted("second"), counted("plain")).Run(runCtx(t), "go", nil); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if counts["first"] != 1 || counts["shared"] != 1 || counts["second"] != 1 || counts["plain"] != 1 {
		t.Errorf("calls = %v", counts)
	}
	reqs := rec.requests()
	if a := acks(reqs[1]); len(a) != 3 || a["c4"] != "" {
		t.Errorf("acks = %v", a)
	}
	if got := toolReturns(reqs[1])["c4"]; got != "plain ok" {
		t.Errorf("plain = %q", got)
	}
	if sys := reqs[0].Messages[0].Parts[0]; strings.Count(fmt.Sprint(sys), "follow-up message") != 1 {
		t.Errorf("instructions repeated: %v", sys)
	}
}

// Scenario: test_background_tool_uses_context_cancel_to_stop_the_run
func cancelFromTool(t *testing.T, h Harness) {
	if h.Remote {
		t.Skip("a remote tool's RunContext is not bound to the agent's run: it cannot Cancel it")
	}
	var cancelled atomic.Int32
	startedA, startedB := make(chan struct{}), make(chan struct{})
	sibling := func(name string, started chan struct{}) *tool.Tool {
		return tool.Func(name, "", func(ctx context.Context, _ *tool.RunContext, _ struct{}) (string, error) {
			close(started)
			<-ctx.Done()
			cancelled.Add(1)
			return "", ctx.Err()
		}, bg())
	}
	stopper := tool.Func("stopper", "", func(ctx context.Context, rc *tool.RunContext, _ struct{}) (string, error) {
		for _, ch := range []chan struct{}{startedA, startedB} {
			select {
			case <-ch:
			case <-ctx.Done():
				return "", ctx.Err()
			}
		}
		rc.Cancel()
		return "stopped", nil
	}, bg())
	m, _ := newModel(untilFollowUps(99, calls(call("a", "c1", "{}"), call("b", "c2", "{}"), call("stopper", "c3", "{}"))))
	_, err := newAgent(t, h, m, setup{}, sibling("a", startedA), sibling("b", startedB), stopper).Run(runCtx(t), "go", nil)
	if !errors.Is(err, agent.ErrRunCancelled) {
		t.Fatalf("err = %v", err)
	}
	if n := cancelled.Load(); n != 2 {
		t.Errorf("%d siblings cancelled, want 2", n)
	}
}

// Scenario: test_tool_return_preserves_model_content_without_exposing_metadata
func toolReturnFiles(t *testing.T, h Harness) {
	img := []byte{0x89, 'P', 'N', 'G'}
	rich := tool.Func("rich", "", func(context.Context, *tool.RunContext, struct{}) (*tool.Return, error) {
		return &tool.Return{
			Value:    "public answer",
			Content:  []message.Content{message.TextContent("supporting image"), message.FileContent("chart.png", "image/png", img)},
			Metadata: map[string]any{"private": "app-only"},
		}, nil
	}, bg())
	m, rec := newModel(untilFollowUps(1, calls(call("rich", "c1", "{}"))))
	if _, err := newAgent(t, h, m, setup{}, rich).Run(runCtx(t), "go", nil); err != nil {
		t.Fatal(err)
	}
	reqs := rec.requests()
	last := reqs[len(reqs)-1]
	fu := followUps(last)
	if len(fu) != 1 || len(fu[0].Content) != 3 {
		t.Fatalf("follow-ups = %+v", fu)
	}
	c := fu[0].Content
	if !strings.HasSuffix(c[0].Text, ") completed.\nResult: public answer") || c[1].Text != "supporting image" || c[2].Type != "file" || !bytes.Equal(c[2].Data, img) {
		t.Errorf("content = %+v", c)
	}
	b, _ := json.Marshal(last.Messages)
	if bytes.Contains(b, []byte("app-only")) {
		t.Error("application metadata reached the model")
	}
}

// Scenario: test_tool_return_preserves_string_content
func toolReturnStrings(t *testing.T, h Harness) {
	rich := tool.Func("rich", "", func(context.Context, *tool.RunContext, struct{}) (tool.Return, error) {
		return tool.Return{Value: "public answer", Content: []message.Content{message.TextContent("supporting detail")}}, nil
	}, bg())
	m, rec := newModel(untilFollowUps(1, calls(call("rich", "c1", "{}"))))
	if _, err := newAgent(t, h, m, setup{}, rich).Run(runCtx(t), "go", nil); err != nil {
		t.Fatal(err)
	}
	reqs := rec.requests()
	fu := followUpTexts(reqs[len(reqs)-1])
	if len(fu) != 1 || !strings.HasSuffix(fu[0], "completed.\nResult: public answer\nsupporting detail") {
		t.Errorf("follow-ups = %q", fu)
	}
}

// Scenario: test_structured_return_value_uses_core_model_serialization
func structuredReturn(t *testing.T, h Harness) {
	list := tool.Func("list", "", func(context.Context, *tool.RunContext, struct{}) ([]int, error) { return []int{1, 2}, nil }, bg())
	m, rec := newModel(untilFollowUps(1, calls(call("list", "c1", "{}"))))
	if _, err := newAgent(t, h, m, setup{}, list).Run(runCtx(t), "go", nil); err != nil {
		t.Fatal(err)
	}
	reqs := rec.requests()
	fu := followUpTexts(reqs[len(reqs)-1])
	if len(fu) != 1 || !strings.HasSuffix(fu[0], "completed.\nResult: [1,2]") {
		t.Errorf("follow-ups = %q", fu)
	}
}

// Scenario: test_instructions_mention_follow_up_delivery
func instructions(t *testing.T, h Harness) {
	m, rec := newModel(func(int, *llm.Request) *llm.Response { return text("hi") })
	if _, err := newAgent(t, h, m, setup{}).Run(runCtx(t), "go", nil); err != nil {
		t.Fatal(err)
	}
	sys, ok := rec.requests()[0].Messages[0].Parts[0].(message.SystemPrompt)
	if !ok || !strings.Contains(sys.Content, agent.BackgroundInstructions) || !strings.Contains(sys.Content, "follow-up message") {
		t.Errorf("system prompt = %+v", rec.requests()[0].Messages[0].Parts[0])
	}
}

type whoArgs struct {
	Who string `json:"who"`
}

// Scenario: test_concurrent_runs_do_not_share_tasks
func concurrentRuns(t *testing.T, h Harness) {
	// Both tasks finish only once both runs started theirs.
	var startedN atomic.Int32
	both := make(chan struct{})
	work := tool.Func("work", "", func(ctx context.Context, _ *tool.RunContext, a whoArgs) (string, error) {
		if startedN.Add(1) == 2 {
			close(both)
		}
		select {
		case <-both:
			return "result for " + a.Who, nil
		case <-ctx.Done():
			return "", ctx.Err()
		}
	}, bg())
	m, rec := newModel(func(_ int, req *llm.Request) *llm.Response {
		if len(acks(req)) == 0 {
			who := req.Messages[len(req.Messages)-1].Parts[len(req.Messages[len(req.Messages)-1].Parts)-1].(message.UserPrompt).Content[0].Text
			return calls(call("work", "c-"+who, fmt.Sprintf(`{"who":%q}`, who)))
		}
		if len(followUps(req)) > 0 {
			return text("done")
		}
		return text("waiting")
	})
	a := newAgent(t, h, m, setup{}, work)
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i, who := range []string{"a", "b"} {
		wg.Go(func() { _, errs[i] = a.Run(runCtx(t), who, nil) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	for _, req := range rec.requests() {
		a := acks(req)
		fu := followUpTexts(req)
		if len(fu) == 0 {
			continue
		}
		if len(a) != 1 || len(fu) != 1 {
			t.Fatalf("a run saw another's task: acks %v follow-ups %q", a, fu)
		}
		for id, task := range a {
			who := strings.TrimPrefix(id, "c-")
			want := fmt.Sprintf("Background tool 'work' (task %s) completed.\nResult: result for %s", task, who)
			if fu[0] != want {
				t.Errorf("follow-up %q, want %q", fu[0], want)
			}
		}
	}
}

// Scenario: test_deferred_tool_pause_is_not_held_behind_background_tasks
func pauseNotHeld(t *testing.T, h Harness) {
	stopped := make(chan struct{})
	started := make(chan struct{})
	slow := tool.Func("slow", "", func(ctx context.Context, _ *tool.RunContext, _ struct{}) (string, error) {
		close(started)
		<-ctx.Done()
		close(stopped)
		return "", ctx.Err()
	}, bg())
	gate := tool.Func("approve_me", "", func(context.Context, *tool.RunContext, struct{}) (string, error) { return "approved", nil }, tool.NeedsApproval())
	m, rec := newModel(untilFollowUps(1, calls(call("slow", "c1", "{}"), call("approve_me", "c2", "{}"))))
	// The pause comes once the task is running.
	handler := agent.HandleDeferredToolCalls(func(ctx context.Context, _ *tool.RunContext, _ *deferred.Requests) (*deferred.Results, error) {
		select {
		case <-started:
			return nil, nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	})
	var ev events
	res, err := newAgent(t, h, m, setup{cfg: agent.Config{AllowDeferred: true, Capabilities: []agent.Capability{handler}}}, slow, gate).Run(runCtx(t), "go", &agent.RunOptions{OnEvent: ev.add})
	if err != nil || !res.Paused() || len(res.Deferred.Approvals) != 1 {
		t.Fatalf("%v paused %v", err, res.Paused())
	}
	if rec.count() != 1 {
		t.Errorf("%d model requests, want 1", rec.count())
	}
	startedEv := ev.ofType(agent.EventBackgroundTaskStarted)
	if len(startedEv) != 1 {
		t.Fatalf("started events %v", startedEv)
	}
	if h.Remote {
		if len(res.Background) != 1 || res.Background[0].TaskID != startedEv[0].TaskID || res.Background[0].Kind != agent.KindBackground {
			t.Errorf("live remote task not recorded: %+v", res.Background)
		}
		rec := res.PendingRecord()
		if rec == nil || len(rec.Tasks) != 2 {
			t.Errorf("pending record %+v", rec)
		}
		return
	}
	wait(t, stopped, "the in-process task's cancellation")
	if len(res.Background) != 0 {
		t.Errorf("in-process task recorded as running on: %+v", res.Background)
	}
	if fin := ev.ofType(agent.EventBackgroundTaskFinished); len(fin) != 1 || fin[0].Status != "cancelled" {
		t.Errorf("finished events %+v", fin)
	}
}

// waitFinished is a DeferredHandler that waits until n background tasks
// finished, then declines: the pause happens after their outcomes arrived.
func waitFinished(ev *events, n int) agent.Capability {
	done := make(chan struct{})
	var count atomic.Int32
	ev.on = func(e agent.Event) {
		if e.Type == agent.EventBackgroundTaskFinished && int(count.Add(1)) == n {
			close(done)
		}
	}
	return agent.HandleDeferredToolCalls(func(ctx context.Context, _ *tool.RunContext, _ *deferred.Requests) (*deferred.Results, error) {
		select {
		case <-done:
			return nil, nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	})
}

// Scenario: test_deferred_tool_pause_wins_over_a_completed_background_result
func pauseWinsOverCompleted(t *testing.T, h Harness) {
	quick := tool.Func("quick", "", func(context.Context, *tool.RunContext, struct{}) (string, error) { return "quick result", nil }, bg())
	gate := tool.Func("approve_me", "", func(context.Context, *tool.RunContext, struct{}) (string, error) { return "approved", nil }, tool.NeedsApproval())
	m, rec := newModel(untilFollowUps(1, calls(call("quick", "c1", "{}"), call("approve_me", "c2", "{}"))))
	ev := &events{}
	handler := waitFinished(ev, 1)
	res, err := newAgent(t, h, m, setup{cfg: agent.Config{AllowDeferred: true, Capabilities: []agent.Capability{handler}}}, quick, gate).Run(runCtx(t), "go", &agent.RunOptions{OnEvent: ev.add})
	if err != nil || !res.Paused() {
		t.Fatalf("%v paused %v", err, res.Paused())
	}
	if rec.count() != 1 {
		t.Errorf("model called %d times, want once", rec.count())
	}
	// Beyond the harness (which drops it): the outcome is kept in the
	// history, for the resume to deliver.
	b, _ := json.Marshal(res.Messages)
	if !bytes.Contains(b, []byte(`completed.\nResult: quick result`)) {
		t.Errorf("the completed outcome was dropped at the pause: %s", b)
	}
}

// Scenario: test_queued_result_is_not_delayed_by_an_unrelated_live_task
func queuedNotDelayed(t *testing.T, h Harness) {
	gate := make(chan struct{})
	release := closer(gate)
	t.Cleanup(release)
	fast := tool.Func("fast", "", func(context.Context, *tool.RunContext, struct{}) (string, error) { return "fast result", nil }, bg())
	slow := gated("slow", "slow result", gate, nil, bg())
	m, rec := newModel(func(n int, req *llm.Request) *llm.Response {
		switch {
		case n == 0:
			return calls(call("fast", "c1", "{}"), call("slow", "c2", "{}"))
		case hasFollowUp(req, "Background tool 'slow'"):
			return text("done")
		case hasFollowUp(req, "Background tool 'fast'"):
			release()
			return text("waiting for slow")
		default:
			return text("waiting")
		}
	})
	res, err := newAgent(t, h, m, setup{}, fast, slow).Run(runCtx(t), "go", nil)
	if err != nil || res.Output != "done" {
		t.Fatalf("%v output %q", err, res.Output)
	}
	for _, req := range rec.requests() {
		if hasFollowUp(req, "Background tool 'fast'") {
			if hasFollowUp(req, "Background tool 'slow'") {
				t.Error("fast's result waited for slow's")
			}
			break
		}
	}
}

// Scenario: test_failed_background_tool_does_not_cancel_its_sibling
func failedKeepsSibling(t *testing.T, h Harness) {
	gate := make(chan struct{})
	release := closer(gate)
	t.Cleanup(release)
	failing := tool.Func("failing", "", func(context.Context, *tool.RunContext, struct{}) (string, error) { return "", tool.Fail("nope") }, bg())
	sibling := gated("sibling", "sibling ok", gate, nil, bg())
	m, rec := newModel(func(n int, req *llm.Request) *llm.Response {
		switch {
		case n == 0:
			return calls(call("failing", "c1", "{}"), call("sibling", "c2", "{}"))
		case hasFollowUp(req, "Background tool 'sibling'"):
			return text("done")
		case hasFollowUp(req, "Background tool 'failing'"):
			release()
			return text("waiting")
		default:
			return text("waiting")
		}
	})
	res, err := newAgent(t, h, m, setup{}, failing, sibling).Run(runCtx(t), "go", nil)
	if err != nil || res.Output != "done" {
		t.Fatalf("%v output %q", err, res.Output)
	}
	reqs := rec.requests()
	last := reqs[len(reqs)-1]
	if !hasFollowUp(last, "Background tool 'failing'") || !strings.HasSuffix(followUpTexts(last)[1], "completed.\nResult: sibling ok") {
		t.Errorf("follow-ups = %q", followUpTexts(last))
	}
}

// Scenario: test_background_tool_ending_in_cancelled_error_cancels_the_run
func ownCancellation(t *testing.T, h Harness) {
	if h.Remote {
		t.Skip("a worker reports a tool's own cancellation as an error result: only a cancel sent by the agent yields cancelled (SPEC §5.2)")
	}
	started := make(chan struct{})
	siblingStopped := make(chan struct{})
	sibling := tool.Func("sibling", "", func(ctx context.Context, _ *tool.RunContext, _ struct{}) (string, error) {
		close(started)
		<-ctx.Done()
		close(siblingStopped)
		return "", ctx.Err()
	}, bg())
	quitter := tool.Func("quitter", "", func(ctx context.Context, _ *tool.RunContext, _ struct{}) (string, error) {
		select {
		case <-started:
		case <-ctx.Done():
		}
		return "", context.Canceled // the tool's own cancellation
	}, bg())
	m, _ := newModel(untilFollowUps(99, calls(call("sibling", "c1", "{}"), call("quitter", "c2", "{}"))))
	_, err := newAgent(t, h, m, setup{}, sibling, quitter).Run(runCtx(t), "go", nil)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v", err)
	}
	wait(t, siblingStopped, "the sibling's cancellation")
}

// Scenario: test_background_base_exception_stops_the_run
// (SPEC §9 decides otherwise for Go: a panicking tool is a Panic outcome
// and the run goes on; the sibling is not cancelled.)
func panicOutcome(t *testing.T, h Harness) {
	gate := make(chan struct{})
	release := closer(gate)
	t.Cleanup(release)
	boom := tool.Func("boom", "", func(context.Context, *tool.RunContext, struct{}) (string, error) { panic("kaboom") }, bg())
	sibling := gated("sibling", "sibling ok", gate, nil, bg())
	m, rec := newModel(func(n int, req *llm.Request) *llm.Response {
		switch {
		case n == 0:
			return calls(call("boom", "c1", "{}"), call("sibling", "c2", "{}"))
		case hasFollowUp(req, "Background tool 'sibling'"):
			return text("done")
		case hasFollowUp(req, "Background tool 'boom'"):
			release()
		}
		return text("waiting")
	})
	res, err := newAgent(t, h, m, setup{}, boom, sibling).Run(runCtx(t), "go", nil)
	if err != nil || res.Output != "done" {
		t.Fatalf("%v output %q", err, res.Output)
	}
	reqs := rec.requests()
	if fu := followUpTexts(reqs[len(reqs)-1]); len(fu) != 2 || !strings.HasSuffix(fu[0], ") failed: Panic") {
		t.Errorf("follow-ups = %q", fu)
	}
}

// Scenario: test_pre_start_cancellation_releases_reserved_tool_usage
// (A task cancelled when the run ends gives its tool call slot back.)
func releasesReservation(t *testing.T, h Harness) {
	started := make(chan struct{})
	slow := tool.Func("slow", "", func(ctx context.Context, _ *tool.RunContext, _ struct{}) (string, error) {
		close(started)
		<-ctx.Done()
		return "", ctx.Err()
	}, bg())
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

// Scenario: test_fatal_error_during_run_teardown_is_propagated
func fatalAtPause(t *testing.T, h Harness) {
	broken := tool.Func("broken", "", func(context.Context, *tool.RunContext, struct{}) (string, error) {
		return "", tool.Retry("again")
	}, bg(), tool.Retries(0))
	gate := tool.Func("approve_me", "", func(context.Context, *tool.RunContext, struct{}) (string, error) { return "approved", nil }, tool.NeedsApproval())
	m, _ := newModel(untilFollowUps(1, calls(call("broken", "c1", "{}"), call("approve_me", "c2", "{}"))))
	ev := &events{}
	handler := waitFinished(ev, 1)
	_, err := newAgent(t, h, m, setup{cfg: agent.Config{AllowDeferred: true, Capabilities: []agent.Capability{handler}}}, broken, gate).Run(runCtx(t), "go", &agent.RunOptions{OnEvent: ev.add})
	var umb *agent.UnexpectedModelBehavior
	if !errors.As(err, &umb) {
		t.Fatalf("err = %v, want the fatal outcome", err)
	}
}

// Scenario: test_run_abort_waits_for_background_task_cancellation_cleanup
func abortWaitsCleanup(t *testing.T, h Harness) {
	var cleaned atomic.Bool
	started := make(chan struct{})
	slow := tool.Func("slow", "", func(ctx context.Context, _ *tool.RunContext, _ struct{}) (string, error) {
		close(started)
		<-ctx.Done()
		cleaned.Store(true) // cleanup after the cancellation
		return "", ctx.Err()
	}, bg())
	ctx, cancel := context.WithCancel(runCtx(t))
	defer cancel()
	m, _ := newModel(func(n int, _ *llm.Request) *llm.Response {
		if n == 0 {
			return calls(call("slow", "c1", "{}"))
		}
		<-started
		cancel()
		return text("waiting")
	})
	_, err := newAgent(t, h, m, setup{}, slow).Run(ctx, "go", nil)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v", err)
	}
	if !cleaned.Load() {
		t.Error("Run returned before the task's cleanup")
	}
}

// Scenario: test_run_abort_waits_for_default_sync_worker
// (A goroutine that ignores its context: the run waits for it.)
func abortWaitsStubborn(t *testing.T, h Harness) {
	var finished atomic.Bool
	release := make(chan struct{})
	started := make(chan struct{})
	stubborn := tool.Func("stubborn", "", func(context.Context, *tool.RunContext, struct{}) (string, error) {
		close(started)
		<-release // ignores its context
		finished.Store(true)
		return "late", nil
	}, bg())
	ctx, cancel := context.WithCancel(runCtx(t))
	defer cancel()
	go func() {
		<-ctx.Done()
		close(release)
	}()
	m, _ := newModel(func(n int, _ *llm.Request) *llm.Response {
		if n == 0 {
			return calls(call("stubborn", "c1", "{}"))
		}
		<-started
		cancel()
		return text("waiting")
	})
	_, err := newAgent(t, h, m, setup{}, stubborn).Run(ctx, "go", nil)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v", err)
	}
	if !finished.Load() {
		t.Error("Run returned before the goroutine finished")
	}
}

// Scenario: test_cancellation_token_cancels_live_tasks
// (Go's cancellation token is the run's context: SIGINT interrupts.)
func interruptCancels(t *testing.T, h Harness) {
	stopped := make(chan struct{})
	started := make(chan struct{})
	slow := tool.Func("slow", "", func(ctx context.Context, _ *tool.RunContext, _ struct{}) (string, error) {
		close(started)
		<-ctx.Done()
		close(stopped)
		return "", ctx.Err()
	}, bg())
	ctx, cancel := context.WithCancel(runCtx(t))
	defer cancel()
	m, _ := newModel(func(n int, _ *llm.Request) *llm.Response {
		if n == 0 {
			return calls(call("slow", "c1", "{}"))
		}
		<-started
		cancel()
		return text("waiting")
	})
	var ev events
	res, err := newAgent(t, h, m, setup{}, slow).Run(ctx, "go", &agent.RunOptions{OnEvent: ev.add})
	if !errors.Is(err, context.Canceled) || agent.StatusOf(res, err) != agent.StatusInterrupted {
		t.Fatalf("err = %v", err)
	}
	wait(t, stopped, "the task's cancellation")
	if fin := ev.ofType(agent.EventBackgroundTaskFinished); len(fin) != 1 || fin[0].Status != "cancelled" {
		t.Errorf("finished events %+v", fin)
	}
}

type queryArgs struct {
	Query string `json:"query"`
}

func research(opts ...tool.Option) *tool.Tool {
	return tool.Func("research", "", func(_ context.Context, _ *tool.RunContext, a queryArgs) (string, error) {
		return "researched " + a.Query, nil
	}, opts...)
}

// Scenario: test_only_optional_tools_advertise_run_in_background
func onlyOptionalAdvertise(t *testing.T, h Harness) {
	plain := tool.Func("plain", "", func(context.Context, *tool.RunContext, queryArgs) (string, error) { return "", nil })
	always := tool.Func("always", "", func(context.Context, *tool.RunContext, queryArgs) (string, error) { return "", nil }, bg())
	m, rec := newModel(func(int, *llm.Request) *llm.Response { return text("hi") })
	if _, err := newAgent(t, h, m, setup{}, research(optional()), plain, always).Run(runCtx(t), "go", nil); err != nil {
		t.Fatal(err)
	}
	for _, d := range rec.requests()[0].Tools {
		var schema struct {
			Properties map[string]json.RawMessage `json:"properties"`
			Required   []string                   `json:"required"`
		}
		if err := json.Unmarshal(d.Parameters, &schema); err != nil {
			t.Fatal(err)
		}
		flag, has := schema.Properties["run_in_background"]
		if has != (d.Name == "research") {
			t.Errorf("%s advertises run_in_background: %v", d.Name, has)
		}
		if has {
			var got, want any
			_ = json.Unmarshal(flag, &got)
			_ = json.Unmarshal([]byte(`{"type":"boolean","description":"Set to true to keep working and get the result later as a follow-up message."}`), &want)
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("flag schema %s", flag)
			}
			for _, r := range schema.Required {
				if r == "run_in_background" {
					t.Error("the flag is required")
				}
			}
		}
	}
}

// Scenario: test_model_opting_in_runs_tool_in_background
func optingIn(t *testing.T, h Harness) {
	m, rec := newModel(untilFollowUps(1, calls(call("research", "c1", `{"query":"topic","run_in_background":true}`))))
	if _, err := newAgent(t, h, m, setup{}, research(optional())).Run(runCtx(t), "go", nil); err != nil {
		t.Fatal(err)
	}
	reqs := rec.requests()
	id := acks(reqs[1])["c1"]
	last := reqs[len(reqs)-1]
	want := fmt.Sprintf("Background tool 'research' (task %s) completed.\nResult: researched topic", id)
	if fu := followUpTexts(last); id == "" || len(fu) != 1 || fu[0] != want {
		t.Errorf("follow-ups = %q, want [%q]", fu, want)
	}
}

// Scenario: test_model_omitting_flag_runs_tool_inline
func omittingFlag(t *testing.T, h Harness) {
	m, rec := newModel(untilFollowUps(1, calls(call("research", "c1", `{"query":"topic"}`))))
	res, err := newAgent(t, h, m, setup{}, research(optional())).Run(runCtx(t), "go", nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := toolReturns(rec.requests()[1])["c1"]; got != "researched topic" || res.Output != "waiting" {
		t.Errorf("return %q output %q", got, res.Output)
	}
}

// Scenario: test_always_background_selector_wins_over_optional_metadata
func selectorWins(t *testing.T, h Harness) {
	m, rec := newModel(untilFollowUps(1, calls(call("research", "c1", `{"query":"topic"}`))))
	caps := func(exec agent.Executor) []agent.Capability {
		return []agent.Capability{agent.BackgroundTools(agent.BackgroundConfig{Tools: agent.SelectNames("research"), Executor: exec})}
	}
	if _, err := newAgent(t, h, m, setup{caps: caps}, research(optional())).Run(runCtx(t), "go", nil); err != nil {
		t.Fatal(err)
	}
	reqs := rec.requests()
	if strings.Contains(string(reqs[0].Tools[0].Parameters), "run_in_background") {
		t.Error("the flag is advertised for an always-background tool")
	}
	if acks(reqs[1])["c1"] == "" {
		t.Error("the call did not run in the background")
	}
}

// Scenario: test_optional_tool_with_existing_run_in_background_parameter_is_rejected
func existingFlagRejected(t *testing.T, h Harness) {
	type own struct {
		RunInBackground bool `json:"run_in_background"`
	}
	clash := tool.Func("clash", "", func(context.Context, *tool.RunContext, own) (string, error) { return "", nil }, optional())
	m, rec := newModel(func(int, *llm.Request) *llm.Response { return text("never") })
	_, err := newAgent(t, h, m, setup{}, clash).Run(runCtx(t), "go", nil)
	var ue *agent.UserError
	if !errors.As(err, &ue) || err.Error() != "Tool 'clash' already has a 'run_in_background' parameter, so it cannot be an optional background tool." {
		t.Fatalf("err = %v", err)
	}
	if rec.count() != 0 {
		t.Error("the model was called")
	}
}

// Scenario: test_invalid_args_for_optional_tool_are_retried
func invalidArgsRetried(t *testing.T, h Harness) {
	for _, c := range []struct{ name, args, want string }{
		{"not-json", `{`, "Invalid arguments"},
		{"not-object", `[]`, "Invalid arguments"},
		{"flag-not-boolean", `{"query":"topic","run_in_background":"yes"}`, "`run_in_background` must be true or false."},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			m, rec := newModel(func(n int, _ *llm.Request) *llm.Response {
				switch n {
				case 0:
					return calls(call("research", "c1", c.args))
				case 1:
					return calls(call("research", "c2", `{"query":"topic"}`))
				default:
					return text("done")
				}
			})
			if _, err := newAgent(t, h, m, setup{}, research(optional())).Run(runCtx(t), "go", nil); err != nil {
				t.Fatal(err)
			}
			reqs := rec.requests()
			var retry *message.RetryPrompt
			for _, p := range reqs[1].Messages[len(reqs[1].Messages)-1].Parts {
				if r, ok := p.(message.RetryPrompt); ok {
					retry = &r
				}
			}
			if retry == nil || !strings.HasPrefix(retry.Content, c.want) {
				t.Fatalf("retry = %+v", retry)
			}
			if got := toolReturns(reqs[2])["c2"]; got != "researched topic" {
				t.Errorf("second call = %q", got)
			}
		})
	}
}

// Scenario: acceptance of issue 9 — three background calls gated on
// channels and one quick inline call in one response: the quick result and
// the model's next turn happen before the slow ones finish; each slow
// result reaches the model exactly once; the run returns after the last.
func acceptance(t *testing.T, h Harness) {
	gates := []chan struct{}{make(chan struct{}), make(chan struct{}), make(chan struct{})}
	releases := make([]func(), 3)
	for i, g := range gates {
		releases[i] = closer(g)
		t.Cleanup(releases[i])
	}
	var slowDone atomic.Int32
	slow := func(i int) *tool.Tool {
		return tool.Func(fmt.Sprintf("slow%d", i), "", func(ctx context.Context, _ *tool.RunContext, _ struct{}) (string, error) {
			select {
			case <-gates[i]:
				slowDone.Add(1)
				return fmt.Sprintf("slow %d done", i), nil
			case <-ctx.Done():
				return "", ctx.Err()
			}
		}, bg())
	}
	quick := tool.Func("quick", "", func(context.Context, *tool.RunContext, struct{}) (string, error) { return "quick result", nil })
	var quickSeenEarly, turnBeforeSlow atomic.Bool
	m, rec := newModel(func(n int, req *llm.Request) *llm.Response {
		if n == 0 {
			return calls(call("slow0", "s0", "{}"), call("slow1", "s1", "{}"), call("quick", "q", "{}"), call("slow2", "s2", "{}"))
		}
		k := len(followUps(req))
		if n == 1 {
			quickSeenEarly.Store(toolReturns(req)["q"] == "quick result" && slowDone.Load() == 0)
			turnBeforeSlow.Store(k == 0 && slowDone.Load() == 0)
		}
		if k == 3 {
			return text("done")
		}
		releases[k]() // one more slow call may finish
		return text(fmt.Sprintf("working, %d of 3 back", k))
	})
	var ev events
	res, err := newAgent(t, h, m, setup{}, slow(0), slow(1), quick, slow(2)).Run(runCtx(t), "go", &agent.RunOptions{OnEvent: ev.add})
	if err != nil || res.Output != "done" {
		t.Fatalf("%v output %q", err, res.Output)
	}
	if !quickSeenEarly.Load() || !turnBeforeSlow.Load() {
		t.Error("the quick result or the model's next turn waited for a slow call")
	}
	reqs := rec.requests()
	ids := acks(reqs[1])
	last := reqs[len(reqs)-1]
	for _, c := range []string{"s0", "s1", "s2"} {
		n := 0
		for _, fu := range followUpTexts(last) {
			if strings.Contains(fu, "(task "+ids[c]+") completed.") {
				n++
			}
		}
		if ids[c] == "" || n != 1 {
			t.Errorf("call %s (task %q) delivered %d times", c, ids[c], n)
		}
	}
	if fin := ev.ofType(agent.EventBackgroundTaskFinished); len(fin) != 3 || slowDone.Load() != 3 {
		t.Errorf("run returned with %d tasks finished", len(fin))
	}
}

// Scenario: SIGTERM (SPEC §6.1) — RunOptions.Suspend stops the run at its
// next safe point; live tasks are detached when the executor can,
// cancelled otherwise; the run returns paused.
func suspend(t *testing.T, h Harness) {
	suspendCh := make(chan struct{})
	stop := closer(suspendCh)
	stopped := make(chan struct{})
	started := make(chan struct{})
	slow := tool.Func("slow", "", func(ctx context.Context, _ *tool.RunContext, _ struct{}) (string, error) {
		close(started)
		<-ctx.Done()
		close(stopped)
		return "", ctx.Err()
	}, bg())
	m, rec := newModel(func(n int, _ *llm.Request) *llm.Response {
		if n == 0 {
			return calls(call("slow", "c1", "{}"))
		}
		<-started
		stop()
		return text("waiting")
	})
	res, err := newAgent(t, h, m, setup{}, slow).Run(runCtx(t), "go", &agent.RunOptions{Suspend: suspendCh})
	if err != nil || !res.Suspended || agent.StatusOf(res, err) != agent.StatusPaused {
		t.Fatalf("%v suspended %v", err, res.Suspended)
	}
	if rec.count() != 2 {
		t.Errorf("%d model requests, want 2", rec.count())
	}
	if h.Remote {
		if len(res.Background) != 1 {
			t.Errorf("live remote task not recorded: %+v", res.Background)
		}
		return
	}
	wait(t, stopped, "the in-process task's cancellation")
	if len(res.Background) != 0 {
		t.Errorf("in-process task recorded as running on: %+v", res.Background)
	}
}

// Scenario: events of SPEC §6.3 — tool_call, background_task_started,
// progress and background_task_finished name the task of the ack.
func eventsNameTheTask(t *testing.T, h Harness) {
	// Progress is best effort and travels apart from the result: the tool
	// returns once its report was seen, so the result cannot overtake it.
	seen := make(chan struct{})
	var once sync.Once
	reporting := tool.Func("reporting", "", func(ctx context.Context, _ *tool.RunContext, _ struct{}) (string, error) {
		progress.Report(ctx, "halfway", progress.Fraction(0.5))
		select {
		case <-seen:
		case <-ctx.Done():
			return "", ctx.Err()
		}
		return "reported", nil
	}, bg())
	m, rec := newModel(untilFollowUps(1, calls(call("reporting", "c1", "{}"))))
	var ev events
	onEvent := func(e agent.Event) {
		ev.add(e)
		if e.Type == agent.EventProgress {
			once.Do(func() { close(seen) })
		}
	}
	if _, err := newAgent(t, h, m, setup{}, reporting).Run(runCtx(t), "go", &agent.RunOptions{OnEvent: onEvent}); err != nil {
		t.Fatal(err)
	}
	id := acks(rec.requests()[1])["c1"]
	if id == "" {
		t.Fatal("no ack")
	}
	if tc := ev.ofType(agent.EventToolCall); len(tc) != 1 || tc[0].TaskID != id {
		t.Errorf("tool_call events %+v", tc)
	}
	if st := ev.ofType(agent.EventBackgroundTaskStarted); len(st) != 1 || st[0].TaskID != id || st[0].Tool != "reporting" || st[0].ToolCallID != "c1" {
		t.Errorf("started events %+v", st)
	}
	if pr := ev.ofType(agent.EventProgress); len(pr) != 1 || pr[0].TaskID != id || pr[0].Message != "halfway" {
		t.Errorf("progress events %+v", pr)
	}
	if fin := ev.ofType(agent.EventBackgroundTaskFinished); len(fin) != 1 || fin[0].TaskID != id || fin[0].Status != "completed" {
		t.Errorf("finished events %+v", fin)
	}
}
