package conformance_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/offload-dev/offload/pkg/natsjs/conformance"
	"github.com/offload-dev/offload/pkg/natsjs/natstest"
	"github.com/offload-dev/offload/pkg/natsjs/worker"
	"github.com/offload-dev/offload/pkg/tool"
)

// slowArgs run longer than the fake worker's (and the Go worker's, below)
// 1 s ack wait.
var (
	quickArgs = json.RawMessage(`{"seconds":0}`)
	slowArgs  = json.RawMessage(`{"seconds":1.6}`)
)

// check runs the kit against the worker of fakeTool on nc's server.
func check(t *testing.T, nc *nats.Conn) map[string]conformance.Outcome {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	outcomes, err := conformance.Run(ctx, conformance.Config{Conn: nc, Tool: fakeTool, Args: quickArgs, SlowArgs: slowArgs, Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if len(outcomes) != len(conformance.Rules()) {
		t.Fatalf("%d outcomes, want one per rule: %v", len(outcomes), outcomes)
	}
	byRule := map[string]conformance.Outcome{}
	for i, o := range outcomes {
		if o.Rule != conformance.Rules()[i] {
			t.Errorf("outcome %d is of %q, want %q", i, o.Rule, conformance.Rules()[i])
		}
		t.Log(o)
		byRule[o.Rule] = o
	}
	return byRule
}

// allOK checks that every rule passed, but the rules that need the kit to
// start the worker (no Exec here), which are skipped.
func allOK(t *testing.T, byRule map[string]conformance.Outcome) {
	t.Helper()
	for _, r := range conformance.Rules() {
		want := conformance.OK
		if r == conformance.RuleSIGTERM || r == conformance.RuleSIGKILL {
			want = conformance.Skip
		}
		if o := byRule[r]; o.Verdict != want {
			t.Errorf("%s, want %s", o, want)
		}
	}
}

// TestRulesNameTheWorkerRules: a rule of the kit that checks one of the
// rules a worker applies to every task is named for it (worker.Rules,
// docs/PROTOCOL.md), alone or followed by what it checks in parentheses;
// every rule of a task the kit checks is so named, and the other rules
// (the worker process's) name none.
func TestRulesNameTheWorkerRules(t *testing.T) {
	t.Parallel()
	taskRules := worker.Rules()
	checked := map[string]bool{}
	for _, r := range conformance.Rules() {
		tr := conformance.TaskRule(r)
		if tr == "" {
			for _, w := range taskRules {
				if r == w || strings.HasPrefix(r, w+" (") {
					t.Errorf("rule %q of the worker process is named for the rule of a task %q", r, w)
				}
			}
			continue
		}
		if !slices.Contains(taskRules, tr) {
			t.Errorf("rule %q checks %q, which is no rule of a task (worker.Rules: %v)", r, tr, taskRules)
		}
		if r != tr && !strings.HasPrefix(r, tr+" (") {
			t.Errorf("rule %q checks %q: want it named %q or %q", r, tr, tr, tr+" (…)")
		}
		checked[tr] = true
	}
	for _, want := range []string{"decode", "hold", "cancelled", "deadline", "arguments", "effect ledger", "run", "respond"} {
		if !checked[want] {
			t.Errorf("no rule of the kit checks the rule of a task %q", want)
		}
	}
}

// TestCheckPassesAgainstFakeWorker: a worker written from the protocol
// document, breaking no rule, passes every rule.
func TestCheckPassesAgainstFakeWorker(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	startFake(t, srv.Conn(t), faults{})
	allOK(t, check(t, srv.Conn(t)))
}

// TestCheckPassesAgainstGoWorker: the Go worker (what toolworker runs)
// passes every rule; its tool is not declared idempotent, so it keeps the
// effect ledger.
func TestCheckPassesAgainstGoWorker(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	startGoWorker(t, srv, false)
	allOK(t, check(t, srv.Conn(t)))
}

// TestCheckFailsGoWorkerWithoutLedger: the Go worker run without the
// effect ledger (worker.Config.NoEffectLedger) for a tool not declared
// idempotent fails the ledger rule (it does not even create the bucket;
// the fake worker's fault, below, covers a bucket without the entry).
func TestCheckFailsGoWorkerWithoutLedger(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	startGoWorker(t, srv, true)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var ledger conformance.Outcome
	_, err := conformance.Run(ctx, conformance.Config{Conn: srv.Conn(t), Tool: fakeTool, Args: quickArgs, Timeout: 10 * time.Second,
		OnOutcome: func(o conformance.Outcome) {
			if o.Rule == conformance.RuleEffectLedger {
				ledger = o
				cancel() // the rules after it do not matter here
			}
		}})
	if err != nil && !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
	if ledger.Verdict != conformance.Fail || !strings.Contains(ledger.Detail, "no effect ledger") {
		t.Errorf("%s, want FAIL saying there is no effect ledger", ledger)
	}
}

// startGoWorker starts a Go worker of fakeTool (sleeping its seconds, not
// declared idempotent), without the effect ledger if noLedger.
func startGoWorker(t *testing.T, srv *natstest.Server, noLedger bool) {
	t.Helper()
	job := tool.Func(fakeTool, "Sleeps.", func(ctx context.Context, _ *tool.RunContext, a struct {
		Seconds float64 `json:"seconds"`
	}) (string, error) {
		timer := time.NewTimer(time.Duration(a.Seconds * float64(time.Second)))
		defer timer.Stop()
		select {
		case <-timer.C:
			return "slept", nil
		case <-ctx.Done():
			return "", context.Cause(ctx)
		}
	})
	w, err := worker.New(worker.Config{Conn: srv.Conn(t), ID: "go-1", Tools: []*tool.Tool{job}, AckWait: time.Second,
		RegistryRefresh: 500 * time.Millisecond, NoEffectLedger: noLedger})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.StopAndCancel(context.Background()) })
}

// TestCheckFailsFaultyWorkers: a worker breaking one rule fails that rule,
// and the line says what was seen.
func TestCheckFailsFaultyWorkers(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name   string
		f      faults
		rule   string
		detail string
	}{
		{"drops the dedup header", faults{noMsgID: true}, conformance.RuleRespondMsgID, "no Nats-Msg-Id"},
		{"drops the dedup header (stored twice)", faults{noMsgID: true}, conformance.RuleRespondDuplicate, "2 results stored"},
		{"delivery count as attempt", faults{deliveryCountID: true}, conformance.RuleRespondMsgID, "not the delivery count"},
		{"drops the attempt", faults{dropAttempt: true}, conformance.RuleRespondAttempt, "attempt 0"},
		{"ignores cancels (before)", faults{ignoreCancels: true}, conformance.RuleCancelled, "status ok"},
		{"ignores cancels (during)", faults{ignoreCancels: true}, conformance.RuleRunCancelled, "status ok after the cancel"},
		{"acks a cancelled task", faults{ackCancelled: true}, conformance.RuleCancelled, "settled with ack"},
		{"answers with another task ID", faults{wrongTaskID: true}, conformance.RuleRespondTaskID, "result published on"},
		{"runs past a deadline", faults{ignoreDeadline: true}, conformance.RuleDeadline, "status ok"},
		{"never sends in-progress acks", faults{noInProgress: true}, conformance.RuleHoldInProgress, "in-progress"},
		{"runs invalid arguments", faults{noValidation: true}, conformance.RuleArguments, "status ok"},
		{"never refreshes its entry", faults{noRegistryUpdate: true}, conformance.RuleRegistryRefresh, "not written again"},
		{"not idempotent, no ledger", faults{notIdempotent: true}, conformance.RuleEffectLedger, "no ledger entry"},
		{"terminates a malformed task without a result", faults{silentMalformed: true}, conformance.RuleDecode, "does not decode"},
		{"checks the deadline only before running", faults{deadlineAtStart: true}, conformance.RuleRunDeadline, "status ok"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			srv := natstest.Start(t)
			startFake(t, srv.Conn(t), c.f)
			o := check(t, srv.Conn(t))[c.rule]
			if o.Verdict != conformance.Fail || !strings.Contains(o.Detail, c.detail) {
				t.Errorf("%s, want FAIL saying %q", o, c.detail)
			}
		})
	}
}
