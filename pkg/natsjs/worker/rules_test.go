package worker_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/offload-dev/offload/internal/offloadtest"
	"github.com/offload-dev/offload/pkg/limits"
	"github.com/offload-dev/offload/pkg/natsjs"
	"github.com/offload-dev/offload/pkg/natsjs/internal/jstest"
	"github.com/offload-dev/offload/pkg/natsjs/worker"
	"github.com/offload-dev/offload/pkg/protocol"
	"github.com/offload-dev/offload/pkg/tool"
)

// TestRules tests each rule of a delivered task (worker.Rules) on its own,
// against a real server: what the rule lets through, and how it settles a
// delivery it stops (the result stored, the delivery acked, terminated or
// handed back, the tool not run). A rule without a test here fails it.
func TestRules(t *testing.T) {
	t.Parallel()
	tests := map[string]func(*testing.T){
		"decode":         testRuleDecode,
		"hold":           testRuleHold,
		"delivery limit": testRuleDeliveryLimit,
		"answer holder":  testRuleAnswerHolder,
		"cancelled":      testRuleCancelled,
		"deadline":       testRuleDeadline,
		"authentication": testRuleAuthentication,
		"approval":       testRuleApproval,
		"arguments":      testRuleArguments,
		"limits":         testRuleLimits,
		"effect ledger":  testRuleEffectLedger,
		"run":            testRuleRun,
		"retry after":    testRuleRetryAfter,
		"respond":        testRuleRespond,
	}
	for _, name := range worker.Rules() {
		test, ok := tests[name]
		if !ok {
			t.Errorf("rule %q has no test: add one to TestRules", name)
			continue
		}
		delete(tests, name)
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			test(t)
		})
	}
	for name := range tests {
		t.Errorf("TestRules tests %q, which is no rule of worker.Rules", name)
	}
}

// A task that does not decode, or is for another tool, is answered with an
// error (its IDs read) and terminated, without running; a task that
// decodes runs.
func testRuleDecode(t *testing.T) {
	p := newProbe(t)
	p.start(t, worker.Config{})
	conv := protocol.NewID()
	bad := jstest.NewTask("job", conv, `{}`)
	seq := p.publishRaw(t, fmt.Sprintf(`{"task_id":%q,"conversation_id":%q,"tool":"job","args":5}`, bad.TaskID, conv))
	p.settledWith(t, seq, "term")
	if r := p.storedResult(t, bad, 0); r.Status != protocol.StatusError || r.ErrorType != "DecodeError" {
		t.Errorf("task that does not decode: result %+v, want error DecodeError", r)
	}
	other := jstest.NewTask("other", conv, `{}`)
	data, _ := json.Marshal(other)
	p.settledWith(t, p.publishRaw(t, string(data)), "term")
	other.Tool = "job" // answered on the subject of the tool that received it
	if r := p.storedResult(t, other, 0); r.Status != protocol.StatusError || !strings.Contains(r.Message, `task for tool "other"`) {
		t.Errorf("task of another tool: result %+v, want an error naming it", r)
	}
	good := jstest.NewTask("job", conv, `{}`)
	p.settledWith(t, p.publish(t, good, nil), "ack")
	p.ran(t, good)
	p.notRun(t, bad, other)
}

// A task is held while its tool runs: kept alive by in-progress acks past
// the ack wait, and registered where a cancel reaches it.
func testRuleHold(t *testing.T) {
	p := newProbe(t)
	g := jstest.NewGate()
	defer g.Open()
	p.bundle.worker(t, worker.Config{ID: "w", Tools: []*tool.Tool{g.Tool("job", "finished")}})
	task := jstest.NewTask("job", protocol.NewID(), `{}`)
	seq := p.publish(t, task, nil)
	offloadtest.WaitOrTimeout(t, g.Started, "the task to start")
	p.awaitInProgress(t, seq)
	p.publishCancel(t, task)
	offloadtest.WaitOrTimeout(t, g.CtxDone, "the cancel to reach the running tool")
	p.settledWith(t, seq, "term")
	if r := p.storedResult(t, task, 0); r.Status != protocol.StatusCancelled {
		t.Errorf("result %+v, want cancelled", r)
	}
}

// A delivery past the tool's delivery limit is answered
// DeliveriesExhausted and terminated, without running; one within it runs.
func testRuleDeliveryLimit(t *testing.T) {
	p := newProbe(t)
	ctx := context.Background()
	c, err := natsjs.EnsureTaskConsumer(ctx, p.js, "job", natsjs.ProvisionOptions{AckWait: testAckWait, MaxDeliver: 1})
	if err != nil {
		t.Fatal(err)
	}
	conv := protocol.NewID()
	over := jstest.NewTask("job", conv, `{}`)
	seq := p.publish(t, over, nil)
	batch, err := c.Fetch(1, jetstream.FetchMaxWait(wait))
	if err != nil {
		t.Fatal(err)
	}
	for m := range batch.Messages() {
		if err := m.Nak(); err != nil { // its first delivery, handed back
			t.Fatal(err)
		}
	}
	p.settledWith(t, seq, "nak")
	within := jstest.NewTask("job", conv, `{}`)
	p.publish(t, within, nil)
	p.start(t, worker.Config{MaxDeliver: 1})
	if r := p.storedResult(t, over, 0); r.Status != protocol.StatusError || r.ErrorType != protocol.ErrorDeliveriesExhausted {
		t.Errorf("result %+v, want error DeliveriesExhausted", r)
	}
	p.settledWith(t, seq, "term")
	p.ran(t, within)
	p.notRun(t, over)
}

// A task whose cancel is stored is answered cancelled and terminated,
// without running; TestFailedCancelLookupDoesNotRun hands back one whose
// cancel cannot be looked up.
func testRuleCancelled(t *testing.T) {
	p := newProbe(t)
	conv := protocol.NewID()
	cancelled, kept := jstest.NewTask("job", conv, `{}`), jstest.NewTask("job", conv, `{}`)
	seq := p.publish(t, cancelled, nil)
	p.publishCancel(t, cancelled)
	p.publish(t, kept, nil)
	p.start(t, worker.Config{})
	if r := p.storedResult(t, cancelled, 0); r.Status != protocol.StatusCancelled {
		t.Errorf("result %+v, want cancelled", r)
	}
	p.settledWith(t, seq, "term")
	p.ran(t, kept)
	p.notRun(t, cancelled)
}

// A task past its deadline is answered DeadlineExceeded and acked, without
// running; a task with a deadline to come runs with it as its context's.
func testRuleDeadline(t *testing.T) {
	p := newProbe(t)
	p.start(t, worker.Config{})
	conv := protocol.NewID()
	past := jstest.NewTask("job", conv, `{}`)
	past.Deadline = time.Now().Add(-time.Second)
	seq := p.publish(t, past, nil)
	if r := p.storedResult(t, past, 0); r.Status != protocol.StatusError || r.ErrorType != protocol.ErrorDeadlineExceeded {
		t.Errorf("result %+v, want error DeadlineExceeded", r)
	}
	p.settledWith(t, seq, "ack")
	future := jstest.NewTask("job", conv, `{}`)
	future.Deadline = time.Now().Add(time.Hour).UTC().Truncate(time.Millisecond)
	p.publish(t, future, nil)
	if run := p.ran(t, future); !run.deadline.Equal(future.Deadline) {
		t.Errorf("the tool's context ends at %v, want the task's deadline %v", run.deadline, future.Deadline)
	}
	p.notRun(t, past)
}

// With a task key, an approved task without a valid MAC is answered
// UnauthenticatedTask and acked, without running; one with the key's MAC
// runs, and so does an unapproved one without a MAC.
func testRuleAuthentication(t *testing.T) {
	p := newProbe(t)
	key := []byte("the store's task key")
	p.start(t, worker.Config{TaskKey: key})
	conv := protocol.NewID()
	forged := jstest.NewTask("job", conv, `{}`)
	forged.Approved = true
	seq := p.publish(t, forged, nats.Header{protocol.TaskMACHeader: {"not a MAC"}})
	if r := p.storedResult(t, forged, 0); r.Status != protocol.StatusError || r.ErrorType != protocol.ErrorUnauthenticatedTask {
		t.Errorf("result %+v, want error UnauthenticatedTask", r)
	}
	p.settledWith(t, seq, "ack")
	signed := jstest.NewTask("job", conv, `{}`)
	signed.Approved = true
	data, _ := json.Marshal(signed)
	p.publishMsg(t, "tools.task.job", data, nats.Header{protocol.TaskMACHeader: {protocol.TaskMAC(key, data)}})
	p.ran(t, signed)
	plain := jstest.NewTask("job", conv, `{}`)
	p.publish(t, plain, nil)
	p.ran(t, plain)
	p.notRun(t, forged)
}

// A task of a tool that requires approval is answered approval_required
// and terminated, without running, unless it says it was approved.
func testRuleApproval(t *testing.T) {
	p := newProbe(t)
	p.start(t, worker.Config{}, tool.NeedsApproval())
	conv := protocol.NewID()
	unapproved := jstest.NewTask("job", conv, `{}`)
	seq := p.publish(t, unapproved, nil)
	if r := p.storedResult(t, unapproved, 0); r.Status != protocol.StatusApprovalRequired {
		t.Errorf("result %+v, want approval_required", r)
	}
	p.settledWith(t, seq, "term")
	approved := jstest.NewTask("job", conv, `{}`)
	approved.Approved = true
	p.publish(t, approved, nil)
	p.ran(t, approved)
	p.notRun(t, unapproved)
}

// Arguments the tool's schema refuses are answered retry InvalidArguments
// (with the validation message) and acked, without running (no ledger
// entry written); valid ones reach the tool as they are.
func testRuleArguments(t *testing.T) {
	p := newProbe(t)
	p.start(t, worker.Config{})
	conv := protocol.NewID()
	invalid := jstest.NewTask("job", conv, `{"n":"five"}`)
	seq := p.publish(t, invalid, nil)
	if r := p.storedResult(t, invalid, 0); r.Status != protocol.StatusRetry || r.ErrorType != protocol.ErrorInvalidArguments || r.Message == "" {
		t.Errorf("result %+v, want retry InvalidArguments with a message", r)
	}
	p.settledWith(t, seq, "ack")
	p.noEffect(t, invalid) // refused before the ledger: the tool's own decoding would refuse it too, after
	valid := jstest.NewTask("job", conv, `{"n":5}`)
	p.publish(t, valid, nil)
	if run := p.ran(t, valid); run.n != 5 {
		t.Errorf("the tool got n = %d, want 5", run.n)
	}
	p.notRun(t, invalid)
}

// A tool not declared idempotent runs only once its attempt's ledger entry
// is created, started by the worker; nothing more is written to the ledger
// (the stored result is the proof of completion, SPEC §13); an attempt
// started by a worker that stopped, no result stored, is answered
// approval_required (effect unknown) and acked, without running.
// (TestStoredResultAnsweredWithoutRunning: an attempt answered before is
// acked without running.)
func testRuleEffectLedger(t *testing.T) {
	p := newProbe(t)
	p.start(t, worker.Config{ID: "w"})
	conv := protocol.NewID()
	started := jstest.NewTask("job", conv, `{}`)
	p.putEffect(t, started, natsjs.Effect{Started: natsjs.EffectStarted{Worker: "gone", At: time.Now().UTC()}})
	seq := p.publish(t, started, nil)
	r := p.storedResult(t, started, 0)
	if r.Status != protocol.StatusApprovalRequired || r.Metadata[tool.EffectMetaKey] != tool.EffectUnknown || r.Metadata["worker"] != "gone" {
		t.Errorf("result %+v, want approval_required, effect unknown, started by gone", r)
	}
	p.settledWith(t, seq, "ack")
	fresh := jstest.NewTask("job", conv, `{}`)
	seq = p.publish(t, fresh, nil)
	p.ran(t, fresh)
	p.storedResult(t, fresh, 0)
	p.settledWith(t, seq, "ack")
	if e, rev := p.effectAt(t, fresh); e.Started.Worker != "w" || e.Finished != nil || rev != 2 || p.ledgerWrites(t) != 2 {
		t.Errorf("ledger entry %+v at %d, %d writes in the ledger; want started by w, the second and last write (after the test's own)", e, rev, p.ledgerWrites(t))
	}
	p.notRun(t, started)
}

// An attempt that brings an answer to a call another worker holds
// (tool.AnswerHolderMetaKey) is handed back, not run, while that worker
// advertises the tool; run here once it is gone, when it never advertised
// it, and after maxHolderDeliveries deliveries. The holder runs it at
// once; and a deferral whose answer goes to the next attempt names the
// worker that made it.
func testRuleAnswerHolder(t *testing.T) {
	p := newProbe(t)
	p.start(t, worker.Config{ID: "w"})
	conv := protocol.NewID()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	kv, err := p.js.KeyValue(ctx, "tools_registry")
	if err != nil {
		t.Fatal(err)
	}
	advertise := func(id string, expires time.Time) {
		t.Helper()
		data, _ := json.Marshal(natsjs.NewRegistryEntry(tool.Func("job", "", func(context.Context, *tool.RunContext, jobArgs) (string, error) { return "", nil }), id, expires))
		if _, err := kv.Put(ctx, natsjs.RegistryKey("job", id), data); err != nil {
			t.Fatal(err)
		}
	}
	answer := func(holder string) protocol.Task {
		task := jstest.NewTask("job", conv, `{"n":1}`)
		task.Attempt, task.Approved = 1, true
		task.ToolCallMetadata = map[string]any{tool.AnswerMetaKey: map[string]any{"action": "accept"}, tool.AnswerHolderMetaKey: holder}
		return task
	}

	// Its own: run at once.
	mine := answer("w")
	seq := p.publish(t, mine, nil)
	p.ran(t, mine)
	p.settledWith(t, seq, "ack")

	// Another worker's, alive: handed back until it is gone.
	advertise("h", time.Now().Add(time.Hour))
	theirs := answer("h")
	seq = p.publish(t, theirs, nil)
	p.settledWith(t, seq, "nak")
	p.settledWith(t, seq, "nak")
	p.notRun(t, theirs)
	if err := kv.Delete(ctx, natsjs.RegistryKey("job", "h")); err != nil {
		t.Fatal(err)
	}
	settlement := p.nextAck(t, seq, false)
	for settlement == "nak" { // the deliveries before the delete
		settlement = p.nextAck(t, seq, false)
	}
	if settlement != "ack" {
		t.Fatalf("the answer for a holder gone was settled with %s, want ack", settlement)
	}
	if run := p.ran(t, theirs); run.rc.ToolCallMetadata[tool.AnswerHolderMetaKey] != "h" {
		t.Errorf("run context %+v", run.rc)
	}

	// A worker that never advertised the tool, or whose entry lapsed: run
	// here, without a hand-back.
	advertise("lapsed", time.Now().Add(-time.Second))
	for _, holder := range []string{"nobody", "lapsed"} {
		task := answer(holder)
		seq := p.publish(t, task, nil)
		p.settledWith(t, seq, "ack")
		p.ran(t, task)
	}

	// A holder alive that never pulls it: run here after
	// maxHolderDeliveries deliveries, all but the last handed back.
	advertise("stuck", time.Now().Add(time.Hour))
	stuck := answer("stuck")
	seq = p.publish(t, stuck, nil)
	naks := 0
	for p.nextAck(t, seq, false) == "nak" {
		naks++
	}
	p.ran(t, stuck)
	if naks != worker.MaxHolderDeliveries-1 {
		t.Errorf("%d hand-backs before it ran, want %d", naks, worker.MaxHolderDeliveries-1)
	}

	// The deferral names its worker.
	deferring := jstest.NewTask("job", conv, fmt.Sprintf(`{"n":%d}`, deferForAnswer))
	p.publish(t, deferring, nil)
	if r := p.storedResult(t, deferring, 0); r.Status != protocol.StatusCallDeferred || r.Metadata[tool.AnswerHolderMetaKey] != "w" {
		t.Errorf("deferral %+v, want call_deferred naming w", r)
	}

	testAnswerHolderShippedBackoff(t)
}

// testAnswerHolderShippedBackoff: under the task consumer as shipped (ack
// wait 10 s, backoff 10, 10, 10, 30 and 60 s), the hand-backs of an
// answer for a holder alive that never pulls it come at their own delays
// still (the server would add 20 s to a delayed nak of the 4th delivery
// and 50 s to one of the 5th: a holder SIGKILLed had its answer run 71 s
// late): with a delivery limit of 8, five hand-backs, then run here, in
// about a second.
func testAnswerHolderShippedBackoff(t *testing.T) {
	p := newProbe(t)
	p.start(t, worker.Config{ID: "w", AckWait: -1, MaxDeliver: 8})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	kv, err := p.js.KeyValue(ctx, "tools_registry")
	if err != nil {
		t.Fatal(err)
	}
	data, _ := json.Marshal(natsjs.NewRegistryEntry(tool.Func("job", "", func(context.Context, *tool.RunContext, jobArgs) (string, error) { return "", nil }), "stuck", time.Now().Add(time.Hour)))
	if _, err := kv.Put(ctx, natsjs.RegistryKey("job", "stuck"), data); err != nil {
		t.Fatal(err)
	}
	task := jstest.NewTask("job", protocol.NewID(), `{"n":1}`)
	task.Attempt, task.Approved = 1, true
	task.ToolCallMetadata = map[string]any{tool.AnswerMetaKey: map[string]any{"action": "accept"}, tool.AnswerHolderMetaKey: "stuck"}
	began := time.Now()
	seq := p.publish(t, task, nil)
	naks := 0
	for p.nextAck(t, seq, false) == "nak" {
		naks++
	}
	p.ran(t, task)
	if naks != 5 {
		t.Errorf("%d hand-backs before it ran, want 5 (delivery limit 8)", naks)
	}
	if took := time.Since(began); took > 10*time.Second {
		t.Errorf("ran %v after it was stored, want about a second of hand-backs", took)
	}
}

// The tool runs with the task's run context, and what it returns is the
// result: a value, or its error as the result's status.
func testRuleRun(t *testing.T) {
	p := newProbe(t)
	p.start(t, worker.Config{})
	conv := protocol.NewID()
	task := jstest.NewTask("job", conv, `{"n":1}`)
	task.Attempt, task.Retry, task.RunID, task.ToolCallMetadata = 1, 2, "run-1", map[string]any{"by": "ann"}
	seq := p.publish(t, task, nil)
	run := p.ran(t, task)
	rc := run.rc
	if rc.TaskID != task.TaskID || rc.ConversationID != conv || rc.ToolCallID != task.ToolCallID || rc.ToolName != "job" ||
		rc.RunID != "run-1" || rc.Attempt != 1 || rc.Retry != 2 || rc.IdempotencyKey != task.TaskID+":1" || fmt.Sprint(rc.ToolCallMetadata) != "map[by:ann]" {
		t.Errorf("run context %+v, want the task's", rc)
	}
	if r := p.storedResult(t, task, 1); r.Status != protocol.StatusOK || jstest.Content(t, r) != "ran 1" {
		t.Errorf("result %+v, want ok \"ran 1\"", r)
	}
	p.settledWith(t, seq, "ack")
	failing := jstest.NewTask("job", conv, `{"n":-1}`)
	seq = p.publish(t, failing, nil)
	if r := p.storedResult(t, failing, 0); r.Status != protocol.StatusFailed || r.Message != "n is negative" {
		t.Errorf("result %+v, want failed \"n is negative\"", r)
	}
	p.settledWith(t, seq, "ack")
}

// The result is published on the task's result subject with Nats-Msg-Id
// res:<task>:<attempt>, carrying the task's IDs, attempt and the worker,
// then the delivery is acked.
func testRuleRespond(t *testing.T) {
	p := newProbe(t)
	p.start(t, worker.Config{ID: "w"})
	task := jstest.NewTask("job", protocol.NewID(), `{}`)
	task.Attempt = 2
	seq := p.publish(t, task, nil)
	p.settledWith(t, seq, "ack")
	ctx := context.Background()
	s, err := p.js.Stream(ctx, "TOOLS_RESULTS")
	if err != nil {
		t.Fatal(err)
	}
	subject := "tools.result." + task.ConversationID + "." + task.TaskID + ".job"
	m, err := s.GetLastMsgForSubject(ctx, subject)
	if err != nil {
		t.Fatalf("no result stored on %s: %v", subject, err)
	}
	if id := m.Header.Get(jetstream.MsgIDHeader); id != protocol.ResultMsgID(task.TaskID, 2) {
		t.Errorf("Nats-Msg-Id %q, want %q", id, protocol.ResultMsgID(task.TaskID, 2))
	}
	var r protocol.Result
	if err := json.Unmarshal(m.Data, &r); err != nil {
		t.Fatal(err)
	}
	if r.TaskID != task.TaskID || r.ToolCallID != task.ToolCallID || r.Attempt != 2 || r.Worker != "w" || r.StartedAt.IsZero() || r.FinishedAt.Before(r.StartedAt) {
		t.Errorf("result %+v, want the task's IDs, attempt 2, worker w and when it ran", r)
	}
}

// A task of a tool with limits runs when they allow it; otherwise it is
// queued: its delivery acked without a result and without running, a
// progress report saying why and behind how many, and it runs from the
// queue once they allow it. A task without limits is not held.
func testRuleLimits(t *testing.T) {
	p := newProbe(t)
	g := jstest.NewGate()
	defer g.Open()
	gated := g.Tool("job", "finished")
	gated.Limits = &limits.Limits{MaxInFlight: 1}
	p.bundle.worker(t, worker.Config{ID: "w", Tools: []*tool.Tool{gated}})
	conv := protocol.NewID()
	first := jstest.NewTask("job", conv, `{}`)
	seq1 := p.publish(t, first, nil)
	offloadtest.WaitOrTimeout(t, g.Started, "the first task to start")
	second := jstest.NewTask("job", conv, `{}`)
	progress := p.signalProgress(t, second)
	seq2 := p.publish(t, second, nil)
	p.settledWith(t, seq2, "ack") // queued
	pr := offloadtest.WaitOrTimeout(t, progress, "the queued report")
	if pr.Queued == nil || pr.Queued.Reason != limits.ReasonMaxInFlight || pr.Queued.Ahead != 0 ||
		pr.Message != "queued: max_in_flight of tool job, 0 ahead" {
		t.Errorf("progress %+v", pr)
	}
	if st := p.toolState(t, "job"); len(st.Queue) != 1 || st.Queue[0].Task != second.TaskID {
		t.Fatalf("queue %+v, want the second task", st.Queue)
	}
	select {
	case id := <-g.Started:
		t.Fatalf("%s started while the first held the only slot", id)
	default:
	}
	g.Open()
	p.settledWith(t, seq1, "ack")
	if r := p.storedResult(t, second, 0); r.Status != protocol.StatusOK {
		t.Errorf("the queued task's result %+v", r)
	}
	offloadtest.Eventually(t, "the queue and its slots emptied", func() bool { // released after the result's ack: no signal
		st := p.toolState(t, "job")
		return len(st.Queue) == 0 && st.Running(time.Now()) == 0
	})
}

// A tool that says the service behind it refused the call for now
// (tool.RetryAfter) is not answered: its tool cools down (the task
// consumer paused, the state's cool-down set), the task is handed back
// and runs again after the cool-down, the model's retry not counted.
func testRuleRetryAfter(t *testing.T) {
	p := newProbe(t)
	var mu sync.Mutex
	var starts []time.Time
	var retries []int
	limited := tool.Func("job", "Refused once.", func(_ context.Context, rc *tool.RunContext, _ struct{}) (string, error) {
		mu.Lock()
		defer mu.Unlock()
		starts, retries = append(starts, time.Now()), append(retries, rc.Retry)
		if len(starts) == 1 {
			return "", fmt.Errorf("upstream said 429: %w", tool.RetryAfter(400*time.Millisecond))
		}
		return "ran", nil
	})
	p.bundle.worker(t, worker.Config{ID: "w", Tools: []*tool.Tool{limited}})
	task := jstest.NewTask("job", protocol.NewID(), `{}`)
	seq := p.publish(t, task, nil)
	p.settledWith(t, seq, "nak")
	c := p.taskConsumer(t, "job")
	info, err := c.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if !info.Paused {
		t.Error("the task consumer is not paused for the cool-down")
	}
	if until, _ := p.toolState(t, "job").CoolUntil(time.Now()); until.IsZero() {
		t.Error("no cool-down in the tool's state")
	}
	if r := p.storedResult(t, task, 0); r.Status != protocol.StatusOK {
		t.Fatalf("result %+v", r)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(starts) != 2 || starts[1].Sub(starts[0]) < 400*time.Millisecond || retries[1] != 0 {
		t.Errorf("runs at %v (retry %v): want a second one after the cool-down, no retry counted", starts, retries)
	}
}

// probe is what a test of one rule watches: the runs of the tool "job"
// and how each delivery of its tasks is settled, as the task consumer's
// ack subjects show it.
type probe struct {
	*bundle
	mu     sync.Mutex
	runs   map[string]jobRun   // by task ID
	newRun chan struct{}       // signalled at every run
	acks   map[uint64][]string // acknowledgements not checked yet, by the task's stream sequence
	newAck chan struct{}       // signalled at every acknowledgement
}

// jobRun is one run of job: its run context, argument and the deadline of
// its context.
type jobRun struct {
	rc       tool.RunContext
	n        int
	deadline time.Time
}

// newProbe starts a server with the streams provisioned, and watches the
// acknowledgements of job's task consumer.
func newProbe(t *testing.T) *probe {
	t.Helper()
	p := &probe{bundle: setup(t), runs: map[string]jobRun{}, newRun: make(chan struct{}, 1),
		acks: map[uint64][]string{}, newAck: make(chan struct{}, 1)}
	p.provision(t)
	p.subscribe(t, "$JS.ACK.TOOLS_TASKS."+natsjs.TaskConsumerName("job")+".>", func(m *nats.Msg) {
		// $JS.ACK.<stream>.<consumer>.<delivered>.<stream seq>.…
		tokens := strings.Split(m.Subject, ".")
		if len(tokens) < 6 {
			return
		}
		seq, err := strconv.ParseUint(tokens[5], 10, 64)
		if err != nil {
			return
		}
		kind := ""
		switch payload := string(m.Data); {
		case strings.HasPrefix(payload, "+ACK"):
			kind = "ack"
		case strings.HasPrefix(payload, "+TERM"):
			kind = "term"
		case strings.HasPrefix(payload, "-NAK"):
			kind = "nak"
		case strings.HasPrefix(payload, "+WPI"):
			kind = "in-progress"
		default:
			return
		}
		p.mu.Lock()
		p.acks[seq] = append(p.acks[seq], kind)
		p.mu.Unlock()
		notify(p.newAck)
	})
	return p
}

// deferForAnswer is the n for which job defers its call, its answer to
// go to the next attempt (an MCP elicitation's way).
const deferForAnswer = -2

// jobArgs are job's arguments.
type jobArgs struct {
	N int `json:"n,omitempty"`
}

// start starts a worker (ID w unless cfg has one) serving job, with opts.
// job returns "ran <n>", or fails for a negative n.
func (p *probe) start(t *testing.T, cfg worker.Config, opts ...tool.Option) {
	t.Helper()
	job := tool.Func("job", "Records its runs.", func(ctx context.Context, rc *tool.RunContext, a jobArgs) (string, error) {
		run := jobRun{rc: *rc, n: a.N}
		run.deadline, _ = ctx.Deadline()
		p.mu.Lock()
		p.runs[rc.TaskID] = run
		p.mu.Unlock()
		notify(p.newRun)
		if a.N == deferForAnswer {
			return "", &tool.CallDeferred{Metadata: map[string]any{tool.AnswerToMetaKey: tool.AnswerToNextAttempt}}
		}
		if a.N < 0 {
			return "", tool.Fail("n is negative")
		}
		return "ran " + strconv.Itoa(a.N), nil
	}, opts...)
	if cfg.ID == "" {
		cfg.ID = "w"
	}
	cfg.Tools = []*tool.Tool{job}
	p.bundle.worker(t, cfg)
}

// publish stores task on job's subject, as an agent does (with hdr), and
// returns its stream sequence.
func (p *probe) publish(t *testing.T, task protocol.Task, hdr nats.Header) uint64 {
	t.Helper()
	data, err := json.Marshal(task)
	if err != nil {
		t.Fatal(err)
	}
	return p.publishMsg(t, "tools.task."+task.Tool, data, hdr)
}

// publishRaw stores data on job's subject and returns its stream sequence.
func (p *probe) publishRaw(t *testing.T, data string) uint64 {
	t.Helper()
	return p.publishMsg(t, "tools.task.job", []byte(data), nil)
}

func (p *probe) publishMsg(t *testing.T, subject string, data []byte, hdr nats.Header) uint64 {
	t.Helper()
	m := nats.NewMsg(subject)
	for k, v := range hdr {
		m.Header[k] = v
	}
	m.Data = data
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	ack, err := p.js.PublishMsg(ctx, m)
	if err != nil {
		t.Fatal(err)
	}
	return ack.Sequence
}

// awaitInProgress waits for an in-progress ack of the task stored at seq.
func (p *probe) awaitInProgress(t *testing.T, seq uint64) {
	t.Helper()
	if k := p.nextAck(t, seq, true); k != "in-progress" {
		t.Fatalf("the task stored at %d was settled with %s before any in-progress ack", seq, k)
	}
}

// settledWith checks that the next settlement (ack, term or nak) of the
// task stored at seq is kind.
func (p *probe) settledWith(t *testing.T, seq uint64, kind string) {
	t.Helper()
	if k := p.nextAck(t, seq, false); k != kind {
		t.Fatalf("the task stored at %d was settled with %s, want %s", seq, k, kind)
	}
}

// nextAck waits for the next acknowledgement of the task stored at seq
// not checked yet (skipping in-progress acks unless inProgress), and
// returns its kind; the acknowledgements up to it are checked.
func (p *probe) nextAck(t *testing.T, seq uint64, inProgress bool) string {
	t.Helper()
	timeout := time.After(wait)
	for {
		if k, ok := p.popAck(seq, inProgress); ok {
			return k
		}
		select {
		case <-p.newAck:
		case <-timeout:
			t.Fatalf("no acknowledgement of the task stored at %d", seq)
		}
	}
}

// popAck takes the acknowledgements of the task stored at seq up to the
// first that is not an in-progress ack (or is, if inProgress), and returns
// its kind.
func (p *probe) popAck(seq uint64, inProgress bool) (string, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for len(p.acks[seq]) > 0 {
		k := p.acks[seq][0]
		p.acks[seq] = p.acks[seq][1:]
		if k != "in-progress" || inProgress {
			return k, true
		}
	}
	return "", false
}

// notify tells ch's reader, without waiting.
func notify(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default: // told already
	}
}

// ran waits for job's run of task.
func (p *probe) ran(t *testing.T, task protocol.Task) jobRun {
	t.Helper()
	timeout := time.After(wait)
	for {
		p.mu.Lock()
		run, ok := p.runs[task.TaskID]
		p.mu.Unlock()
		if ok {
			return run
		}
		select {
		case <-p.newRun:
		case <-timeout:
			t.Fatalf("task %s did not run", task.TaskID)
		}
	}
}

// notRun fails t if job ran any of tasks (checked once they are settled:
// the rules settle a delivery before its tool would run).
func (p *probe) notRun(t *testing.T, tasks ...protocol.Task) {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, task := range tasks {
		if _, ok := p.runs[task.TaskID]; ok {
			t.Errorf("task %s ran", task.TaskID)
		}
	}
}
