package conformance

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/offload-dev/offload/pkg/natsjs"
	"github.com/offload-dev/offload/pkg/protocol"
	"github.com/offload-dev/offload/pkg/tool"
)

// The rules, in the order [Run] checks them: each [Outcome] names one. A
// rule that checks one of the rules a worker applies to every delivered
// task (docs/PROTOCOL.md, "The rules of a task"; the Go worker's
// worker.Rules) is named for it, followed by what it checks in
// parentheses where several check the same one. The other four are rules
// of the worker process: its registry entry, and its stop and crash.
const (
	RuleRegistryEntry    = "registry entry"
	RuleRun              = "run"
	RuleRespondTaskID    = "respond (task ID)"
	RuleRespondMsgID     = "respond (Nats-Msg-Id)"
	RuleEffectLedger     = "effect ledger"
	RuleRespondAttempt   = "respond (attempt)"
	RuleRespondDuplicate = "respond (duplicate delivery)"
	RuleArguments        = "arguments"
	RuleDecode           = "decode"
	RuleCancelled        = "cancelled"
	RuleDeadline         = "deadline"
	RuleRunCancelled     = "run (cancelled)"
	RuleRunDeadline      = "run (deadline)"
	RuleHoldInProgress   = "hold (in-progress acks)"
	RuleRegistryRefresh  = "registry refresh"
	RuleSIGTERM          = "SIGTERM hand-back"
	RuleSIGKILL          = "SIGKILL redelivery"
)

// rules are the kit's rules, in the order [Run] checks them, each with
// the rule of a task it checks ("" for a rule of the worker process).
var rules = [...]struct {
	name     string
	taskRule string
	check    func(*checker, context.Context) Outcome
}{
	{RuleRegistryEntry, "", (*checker).registryEntry},
	{RuleRun, "run", (*checker).task},
	{RuleRespondTaskID, "respond", (*checker).resultTaskID},
	{RuleRespondMsgID, "respond", (*checker).resultMsgID},
	{RuleEffectLedger, "effect ledger", (*checker).effectLedger},
	{RuleRespondAttempt, "respond", (*checker).attempt},
	{RuleRespondDuplicate, "respond", (*checker).duplicate},
	{RuleArguments, "arguments", (*checker).invalidArgs},
	{RuleDecode, "decode", (*checker).malformedTask},
	{RuleCancelled, "cancelled", (*checker).cancelBefore},
	{RuleDeadline, "deadline", (*checker).pastDeadline},
	{RuleRunCancelled, "run", (*checker).cancelDuring},
	{RuleRunDeadline, "run", (*checker).deadlineDuring},
	{RuleHoldInProgress, "hold", (*checker).inProgress},
	{RuleRegistryRefresh, "", (*checker).registryRefresh},
	{RuleSIGTERM, "", (*checker).sigterm},
	{RuleSIGKILL, "", (*checker).sigkill},
}

// Rules returns every rule, in the order [Run] checks them.
func Rules() []string {
	names := make([]string, len(rules))
	for i, r := range rules {
		names[i] = r.name
	}
	return names
}

// Verdict is a rule's outcome.
type Verdict string

// The verdicts.
const (
	// OK: the worker follows the rule.
	OK Verdict = "ok"
	// Fail: it does not; the outcome's Detail says what was seen.
	Fail Verdict = "FAIL"
	// Skip: the rule could not be checked with the configuration given
	// (Detail says what is missing); not a failure.
	Skip Verdict = "skip"
)

// Outcome is the verdict on one rule.
type Outcome struct {
	// Rule is one of the Rule constants.
	Rule string
	// Verdict says whether the worker follows it.
	Verdict Verdict
	// Detail is what was seen (Fail) or what is missing (Skip).
	Detail string
}

// String is the outcome's line: "<rule>: ok", "<rule>: FAIL: <what was
// seen>" or "<rule>: skip: <why>".
func (o Outcome) String() string {
	if o.Verdict == OK {
		return o.Rule + ": ok"
	}
	return o.Rule + ": " + string(o.Verdict) + ": " + o.Detail
}

// Failed reports whether any outcome is a failure.
func Failed(outcomes []Outcome) bool {
	for _, o := range outcomes {
		if o.Verdict == Fail {
			return true
		}
	}
	return false
}

// Config says which worker to check and how.
type Config struct {
	// Conn is the kit's connection (see the package doc for what it must
	// be allowed).
	Conn *nats.Conn
	// Prefix is the subject prefix (default protocol.DefaultPrefix).
	Prefix string
	// Tool is the tool the worker under test serves.
	Tool string
	// Args are the arguments of a normal call, one that succeeds (status
	// ok) quickly (default {}).
	Args json.RawMessage
	// SlowArgs are the arguments of a call that succeeds after running
	// longer than the task consumer's ack wait. Without them the rules
	// that need a running task ([RuleRunCancelled], [RuleRunDeadline],
	// [RuleHoldInProgress], [RuleSIGTERM], [RuleSIGKILL]) are skipped.
	SlowArgs json.RawMessage
	// Exec, when set, is the command (run by sh) that starts the worker
	// under test: the kit starts it before the first rule, and it checks
	// the rules that stop the worker ([RuleSIGTERM], [RuleSIGKILL]),
	// starting it again after each; without it those rules are skipped. No
	// other worker of the tool may run then.
	Exec string
	// ExecOutput receives the started worker's stdout and stderr (default:
	// discarded).
	ExecOutput io.Writer
	// Timeout bounds the wait for each result (default 30 s), and for the
	// started worker's start and stop.
	Timeout time.Duration
	// OnOutcome, when set, is called with every outcome as it is decided.
	OnOutcome func(Outcome)
}

// ErrSetup is wrapped by the errors of a check that could not start: the
// streams, the task consumer or the registry bucket cannot be reached.
var ErrSetup = errors.New("conformance: cannot check")

// settleWait bounds the wait for a delivery's ack or term once its result
// was seen, and a cancel's effect on a running task.
const settleWait = 5 * time.Second

// checker is one run of the kit.
type checker struct {
	cfg     Config
	js      jetstream.JetStream
	subj    protocol.Subjects
	names   natsjs.Names
	ackWait time.Duration
	obs     *observer
	cons    jetstream.Consumer

	entry     *natsjs.RegistryEntry     // the entry checked by the registry rule
	first     []jetstream.KeyValueEntry // the entries it read
	normal    *normalRun                // the normal task's run
	reg       *registryWatch
	ledger    *ledgerWatch // nil: the ledger bucket could not be watched (ledgerErr)
	ledgerErr error
	proc      *process // the worker under test, when the kit started it
}

// normalRun is the normal task and its first result.
type normalRun struct {
	task protocol.Task
	res  resultMsg
}

// Run checks the worker serving cfg.Tool against every rule and returns
// one outcome per rule, in the order of [Rules]. Its error (wrapping
// [ErrSetup]) says why no rule could be checked.
func Run(ctx context.Context, cfg Config) ([]Outcome, error) {
	if err := tool.ValidateName(cfg.Tool); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrSetup, err)
	}
	if len(cfg.Args) == 0 {
		cfg.Args = json.RawMessage(`{}`)
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 30 * time.Second
	}
	c := &checker{cfg: cfg, subj: protocol.Subjects{Prefix: cfg.Prefix}, names: natsjs.NamesFor(cfg.Prefix)}
	js, err := jetstream.New(cfg.Conn)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrSetup, err)
	}
	c.js = js
	if c.cfg.ExecOutput == nil {
		c.cfg.ExecOutput = io.Discard
	}
	if cfg.Exec != "" {
		// Started first: the worker may create what it uses.
		if c.proc, err = startProcess(cfg.Exec, c.cfg.ExecOutput); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrSetup, err)
		}
		defer func() { c.proc.stop(context.WithoutCancel(ctx), c.cfg.Timeout) }()
		if err := c.awaitBucket(ctx); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrSetup, err)
		}
	}
	if c.reg, err = watchRegistry(ctx, js, c.names.RegistryBucket, cfg.Tool); err != nil {
		return nil, fmt.Errorf("%w: registry bucket %s: %w", ErrSetup, c.names.RegistryBucket, err)
	}
	defer c.reg.stop()
	if c.proc != nil {
		if err := c.awaitAdvertised(ctx); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrSetup, err)
		}
	}
	// Watched before the first task (and once a worker the kit started
	// serves, having created what it uses): the ledger's rule checks what
	// the worker wrote, and when.
	c.ledger, c.ledgerErr = watchLedger(ctx, js, c.names.EffectsBucket, cfg.Tool)
	defer c.ledger.stop()
	consumer := natsjs.TaskConsumerName(cfg.Tool)
	c.cons, err = js.Consumer(ctx, c.names.Tasks, consumer)
	if err != nil {
		return nil, fmt.Errorf("%w: task consumer %s of stream %s: %w (is a worker of %s running?)", ErrSetup, consumer, c.names.Tasks, err, cfg.Tool)
	}
	c.ackWait = c.cons.CachedInfo().Config.AckWait
	if c.obs, err = observe(cfg.Conn, c.subj, c.names.Tasks, consumer); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrSetup, err)
	}
	defer c.obs.close()

	out := make([]Outcome, 0, len(rules))
	for _, r := range rules {
		if err := ctx.Err(); err != nil {
			return out, err
		}
		o := r.check(c, ctx)
		o.Rule = r.name
		out = append(out, o)
		if cfg.OnOutcome != nil {
			cfg.OnOutcome(o)
		}
	}
	return out, nil
}

func ok() Outcome { return Outcome{Verdict: OK} }

func fail(format string, args ...any) Outcome {
	return Outcome{Verdict: Fail, Detail: fmt.Sprintf(format, args...)}
}

func skip(format string, args ...any) Outcome {
	return Outcome{Verdict: Skip, Detail: fmt.Sprintf(format, args...)}
}
