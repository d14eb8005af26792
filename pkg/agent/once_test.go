package agent_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/offload-dev/offload/internal/offloadtest"
	"github.com/offload-dev/offload/pkg/agent"
	"github.com/offload-dev/offload/pkg/deferred"
	"github.com/offload-dev/offload/pkg/llm"
	"github.com/offload-dev/offload/pkg/message"
	"github.com/offload-dev/offload/pkg/tool"
)

// store is a durable conversation's store as the loop sees it: it keeps
// the history as the session's Checkpointer saves it (before every model
// request, and at each RecordStep), as JSON, and signals every record.
type store struct {
	mu       sync.Mutex
	saved    []byte
	recorded chan int // the number of outcomes in each RecordStep
}

func newStore() *store { return &store{recorded: make(chan int, 64)} }

func (s *store) save(t message.History) {
	b, err := json.Marshal(t)
	if err != nil {
		panic(err)
	}
	s.mu.Lock()
	s.saved = b
	s.mu.Unlock()
}

func (s *store) BeforeModelRequest(_ context.Context, info *agent.RunInfo, req *message.Message) error {
	h := info.History()
	if len(req.Parts) > 0 {
		h = append(h, *req)
	}
	s.save(h)
	return nil
}

func (s *store) RecordStep(_ context.Context, info *agent.RunInfo, done []message.Part) error {
	h := info.History()
	if len(done) > 0 {
		h = append(h, message.NewRequest(done...))
	}
	s.save(h)
	s.recorded <- len(done)
	return nil
}

// load returns the history stored last, as a process that continues the
// conversation loads it.
func (s *store) load(t *testing.T) message.History {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	var h message.History
	if err := json.Unmarshal(s.saved, &h); err != nil {
		t.Fatal(err)
	}
	return h
}

// crashWorld has a model answering its first request with two calls,
// quick and slow (slow's tool given by the test), and any request after
// the calls' results with "done"; quick runs at once, the first run of
// slow blocks until the run is cancelled (the process dies).
type crashWorld struct {
	m        *fnModel
	quick    atomic.Int32
	slowRuns atomic.Int32
	slowKeys chan string
	// slowAgain has each run of slow's tool.RunContext.Again.
	slowAgain chan bool
	started   chan struct{}
}

func newCrashWorld() *crashWorld {
	w := &crashWorld{slowKeys: make(chan string, 8), slowAgain: make(chan bool, 8), started: make(chan struct{}, 8)}
	w.m = model(func(n int, req *llm.Request) *llm.Response {
		last := req.Messages[len(req.Messages)-1]
		for _, p := range last.Parts {
			if _, ok := p.(message.ToolReturn); ok {
				return text("done")
			}
		}
		if n > 0 {
			return nil
		}
		return calls(call("quick", "c1", `{}`), call("slow", "c2", `{}`))
	})
	return w
}

func (w *crashWorld) tools(slowOpts ...tool.Option) []*tool.Tool {
	quick := tool.Func("quick", "", func(context.Context, *tool.RunContext, struct{}) (string, error) {
		w.quick.Add(1)
		return "quick ran", nil
	})
	slow := tool.Func("slow", "", func(ctx context.Context, rc *tool.RunContext, _ struct{}) (string, error) {
		w.slowKeys <- rc.IdempotencyKey
		w.slowAgain <- rc.Again
		if w.slowRuns.Add(1) == 1 {
			w.started <- struct{}{}
			<-ctx.Done()
			return "", ctx.Err()
		}
		return "slow ran", nil
	}, slowOpts...)
	return []*tool.Tool{quick, slow}
}

// crash runs the first run until slow started and quick's outcome was
// recorded, then cancels it (the process dies there) and returns the
// history stored meanwhile.
func (w *crashWorld) crash(t *testing.T, a *agent.Agent, s *store) message.History {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = a.Run(ctx, "go", &agent.RunOptions{AllowDeferred: true, Capabilities: []agent.Capability{s}})
	}()
	offloadtest.WaitOrTimeout(t, w.started, "slow started")
	for {
		if n := offloadtest.WaitOrTimeout(t, s.recorded, "quick's outcome stored while slow runs"); n > 0 {
			break
		}
	}
	h := s.load(t)
	cancel()
	<-done
	return h
}

// A process that dies while the calls of a model response run (SPEC §20):
// the run continuing the stored conversation asks the model nothing for
// that step (one request before, one after), does not run again the call
// whose outcome was stored, and makes the in-process call not declared
// idempotent that was started a person's decision (an unknown effect,
// SPEC §13), not a second run; approved, it runs as its task's next
// attempt.
func TestStepDoneOnceAfterCrash(t *testing.T) {
	t.Parallel()
	w := newCrashWorld()
	s := newStore()
	a := newAgentCfg(t, agent.Config{Model: w.m}, w.tools()...)
	h := w.crash(t, a, s)
	key := offloadtest.WaitOrTimeout(t, w.slowKeys, "slow's run")
	resp := h[len(h)-2]
	if resp.Role != message.RoleResponse || resp.Metadata["offload.step"] == nil {
		t.Fatalf("stored history ends with %+v, want the response with its step record", h[len(h)-2:])
	}
	if !strings.HasSuffix(key, ":0") || len(key) < 28 {
		t.Fatalf("slow ran with key %q, want <task>:0", key)
	}

	res, err := a.Run(t.Context(), "", &agent.RunOptions{History: h, AllowDeferred: true, Capabilities: []agent.Capability{s}})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(w.m.Requests()); n != 1 {
		t.Fatalf("%d model requests, want 1: the continuation asks nothing before the step's calls end", n)
	}
	if w.quick.Load() != 1 || w.slowRuns.Load() != 1 {
		t.Fatalf("quick ran %d times, slow %d, want once each", w.quick.Load(), w.slowRuns.Load())
	}
	if res.Deferred == nil || len(res.Deferred.Approvals) != 1 || res.Deferred.Approvals[0].ToolCallID != "c2" {
		t.Fatalf("deferred %+v, want slow's call for a person", res.Deferred)
	}
	md := res.Deferred.Metadata["c2"]
	if md[tool.EffectMetaKey] != tool.EffectUnknown || md["started_at"] == nil || md["run_id"] == nil {
		t.Fatalf("metadata %v, want an unknown effect", md)
	}
	task := res.Deferred.TaskIDs["c2"]
	if !strings.HasPrefix(key, task+":") {
		t.Fatalf("deferred as task %s, want the task it ran as (key %s)", task, key)
	}

	// Approved: it runs again, as the next attempt, once.
	res, err = a.Run(t.Context(), "", &agent.RunOptions{History: res.Messages, AllowDeferred: true,
		DeferredResults: &deferred.Results{Approvals: map[string]any{"c2": true}}})
	if err != nil || res.Output != "done" {
		t.Fatalf("%v %+v", err, res)
	}
	if got := offloadtest.WaitOrTimeout(t, w.slowKeys, "slow's run"); got != task+":1" {
		t.Fatalf("approved run's key %q, want %s:1", got, task)
	}
	// The approved attempt, run by a continuation of the stored step, may
	// have been dispatched before by a process that died (the chaos's
	// stuck conversation): its call says so.
	if first, approved := <-w.slowAgain, <-w.slowAgain; first || !approved {
		t.Fatalf("RunContext.Again %v on the first run, %v on the approved one; want false, true", first, approved)
	}
	if w.quick.Load() != 1 || w.slowRuns.Load() != 2 {
		t.Fatalf("quick ran %d times, slow %d, want 1 and 2", w.quick.Load(), w.slowRuns.Load())
	}
	if n := len(w.m.Requests()); n != 2 {
		t.Fatalf("%d model requests, want 2", n)
	}
}

// A call started and not finished is run again by the continuation when
// its tool is declared idempotent (with the same idempotency key), or
// runs on a worker (a dispatched tool: the worker's effect ledger decides,
// SPEC §13, with the same task and attempt).
func TestStepContinuationRunsAgainWithTheSameKey(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		opt  tool.Option
	}{
		{"idempotent", tool.Idempotent()},
		{"dispatched", func(t *tool.Tool) { t.Dispatched = true }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			w := newCrashWorld()
			s := newStore()
			a := newAgentCfg(t, agent.Config{Model: w.m}, w.tools(tc.opt)...)
			h := w.crash(t, a, s)
			first := offloadtest.WaitOrTimeout(t, w.slowKeys, "slow's run")
			res, err := a.Run(t.Context(), "", &agent.RunOptions{History: h, AllowDeferred: true})
			if err != nil || res.Output != "done" {
				t.Fatalf("%v %+v", err, res)
			}
			if again := offloadtest.WaitOrTimeout(t, w.slowKeys, "slow's run"); again != first || first == "" && tc.name == "idempotent" {
				t.Fatalf("run again with key %q, first %q: want the same", again, first)
			}
			// The continuation's call may have been dispatched before (its
			// worker's result then stored): it says so, the first does not.
			if first, again := <-w.slowAgain, <-w.slowAgain; first || !again {
				t.Fatalf("RunContext.Again %v on the first run, %v on the continuation; want false, true", first, again)
			}
			if w.quick.Load() != 1 || w.slowRuns.Load() != 2 {
				t.Fatalf("quick ran %d times, slow %d, want 1 and 2", w.quick.Load(), w.slowRuns.Load())
			}
			if n := len(w.m.Requests()); n != 2 {
				t.Fatalf("%d model requests, want 2", n)
			}
		})
	}
}

// The step is stored before its first call starts, and before its
// deferred calls pause the run, with the task ID each call runs or is
// announced as; a run without a StepRecorder records nothing.
func TestStepRecordedBeforeCallsStart(t *testing.T) {
	t.Parallel()
	s := newStore()
	var seen []string
	var mu sync.Mutex
	probe := tool.Func("probe", "", func(_ context.Context, rc *tool.RunContext, _ struct{}) (string, error) {
		// When the tool runs, the stored history has its call named.
		h := s.load(t)
		raw, _ := json.Marshal(h[len(h)-1].Metadata["offload.step"])
		mu.Lock()
		seen = append(seen, string(raw), rc.TaskID)
		mu.Unlock()
		return "ok", nil
	})
	gated := tool.Func("gated", "", func(context.Context, *tool.RunContext, struct{}) (string, error) { return "", nil }, tool.NeedsApproval())
	m := turns(calls(call("probe", "c1", `{}`), call("gated", "c2", `{}`)))
	a := newAgentCfg(t, agent.Config{Model: m, AllowDeferred: true}, probe, gated)
	res, err := a.Run(t.Context(), "go", &agent.RunOptions{Capabilities: []agent.Capability{s}})
	if err != nil || res.Deferred == nil {
		t.Fatalf("%v %+v", err, res)
	}
	var before map[string]map[string]any
	_ = json.Unmarshal([]byte(seen[0]), &before)
	if len(seen) != 2 || before["c1"]["task_id"] != seen[1] || before["c1"]["started"] == nil {
		t.Fatalf("stored before probe ran: %v", seen)
	}
	h := s.load(t)
	var stored map[string]map[string]any
	raw, _ := json.Marshal(h[len(h)-2].Metadata["offload.step"])
	_ = json.Unmarshal(raw, &stored)
	if task := res.Deferred.TaskIDs["c2"]; stored["c2"]["task_id"] != task || len(h) != 3 || returnContent(t, h[2].Parts[0]) != "ok" {
		t.Fatalf("stored step %s (history of %d), want gated's task %s and probe's outcome", raw, len(h), task)
	}

	// Without a recorder: no step record, no task ID for an in-process call.
	seen = nil
	m2 := turns(calls(call("probe", "c1", `{}`)), text("done"))
	probe2 := tool.Func("probe", "", func(_ context.Context, rc *tool.RunContext, _ struct{}) (string, error) {
		seen = append(seen, rc.TaskID, rc.IdempotencyKey)
		return "ok", nil
	})
	res, err = newAgentCfg(t, agent.Config{Model: m2}, probe2).Run(t.Context(), "go", nil)
	if err != nil || res.Messages[2].Metadata["offload.step"] != nil || seen[0] != "" || seen[1] != "" {
		t.Fatalf("%v %+v %v", err, res.Messages[2].Metadata, seen)
	}
}

// A new prompt given to a conversation whose stored step did not finish
// (its process died) is not refused: the step's calls run first, and the
// prompt follows their results.
func TestPromptAfterAnUnfinishedStep(t *testing.T) {
	t.Parallel()
	w := newCrashWorld()
	s := newStore()
	a := newAgentCfg(t, agent.Config{Model: w.m}, w.tools(tool.Idempotent())...)
	h := w.crash(t, a, s)
	offloadtest.WaitOrTimeout(t, w.slowKeys, "slow's run")
	res, err := a.Run(t.Context(), "and now?", &agent.RunOptions{History: h})
	if err != nil || res.Output != "done" {
		t.Fatalf("%v %+v", err, res)
	}
	last := w.m.Requests()[1].Messages
	parts := last[len(last)-1].Parts
	if u, ok := parts[len(parts)-1].(message.UserPrompt); !ok || u.Content[0].Text != "and now?" {
		t.Fatalf("last parts %+v, want the prompt after the results", parts)
	}
	// Without a step record, the reference's refusal stands.
	h2 := message.History{message.NewRequest(message.UserText("go")), message.NewResponse(call("quick", "c1", `{}`))}
	if _, err := a.Run(t.Context(), "and now?", &agent.RunOptions{History: h2}); err == nil {
		t.Fatal("a prompt after unprocessed calls was accepted")
	}
}
