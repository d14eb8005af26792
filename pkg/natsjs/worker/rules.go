package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/offload-dev/offload/pkg/natsjs/internal/lazylog"
	"github.com/offload-dev/offload/pkg/progress"
	"github.com/offload-dev/offload/pkg/protocol"
	"github.com/offload-dev/offload/pkg/tool"
)

// A rule is one step of the handling of a delivered task (taskRules).
type rule struct {
	// name is the rule's name, as docs/PROTOCOL.md ("The rules of a
	// task") and the conformance kit's rules name it.
	name string
	// apply either passes the task on to the next rule (it returns next),
	// or settles the task's delivery and returns settled: with a result
	// (Worker.answer: published, then the delivery acked or terminated),
	// with an ack and no result (delivery.ack), or by handing the task back
	// (delivery.handBack). A rule that settles logs why.
	apply func(w *Worker, d *delivery) step
}

// step is what a rule returns: whether the task goes on.
type step bool

const (
	next    step = true  // the task goes on to the next rule
	settled step = false // the rule settled the delivery: no rule after it applies
)

// taskRules are the rules of a delivered task, in the order they apply
// (docs/PROTOCOL.md, "The rules of a task"). Every task goes through them
// until one settles its delivery; the last, respond, settles every task
// that ran.
var taskRules = [...]rule{
	{"decode", (*Worker).ruleDecode},
	{"hold", (*Worker).ruleHold},
	{"delivery limit", (*Worker).ruleDeliveryLimit},
	{"answer holder", (*Worker).ruleAnswerHolder},
	{"cancelled", (*Worker).ruleCancelled},
	{"deadline", (*Worker).ruleDeadline},
	{"authentication", (*Worker).ruleAuthentication},
	{"approval", (*Worker).ruleApproval},
	{"arguments", (*Worker).ruleArguments},
	{"limits", (*Worker).ruleLimits},
	{"effect ledger", (*Worker).ruleEffectLedger},
	{"run", (*Worker).ruleRun},
	{"retry after", (*Worker).ruleRetryAfter},
	{"respond", (*Worker).ruleRespond},
}

// Rules returns the names of the rules a worker applies to every delivered
// task, in order (docs/PROTOCOL.md, "The rules of a task"); the
// conformance kit's rules name the one they check.
func Rules() []string {
	names := make([]string, len(taskRules))
	for i, r := range taskRules {
		names[i] = r.name
	}
	return names
}

// delivery is one delivered task on its way through the rules: what they
// learn of it, and what they take for it until it is settled. Its inflight
// is the task as the cancel index and the effect ledger know it.
type delivery struct {
	inflight
	tool *tool.Tool
	log  *slog.Logger
	md   *jetstream.MsgMetadata // nil when the message has none
	// slot is the worker slot the task holds: given back when the rules
	// are done, or as soon as the tool has returned when more tasks were
	// waiting (ruleRun).
	slot heldSlot
	// ctx is the task's context from hold on: cancelled by a cancel or the
	// worker's shutdown, and ended by the task's deadline (from the
	// deadline rule on).
	ctx context.Context

	// The run's outcome, for respond.
	started time.Time
	out     outcome
	term    bool // a cancelled task's delivery is terminated
	// resume is the state the attempt's tool recorded on a worker that
	// stopped (effect ledger: verdictResume), given to it in
	// RunContext.Resume.
	resume json.RawMessage

	// holding is the ID of the call's attempt while it holds slots of its
	// tool's limits, admitted at this delivery (limits.go); a call run
	// from the queue holds them by its claim (queue.go).
	holding string

	// What release gives back, in reverse order of taking.
	stopHeartbeat  func()
	cancelDeadline context.CancelFunc
	running        bool // counted in the Inflight gauge
}

// handle applies the rules to one delivered task, in order, until one
// settles its delivery, then gives back what they took (release). The
// task holds a worker slot from delivery: when more tasks were waiting in
// the consumer as this one was delivered, it is given back as soon as the
// tool has returned, so that the fetcher pulls the next task while this
// one's result is published (the pull's round trip overlaps the publish's);
// otherwise (an idle pool, where an early pull would only compete with the
// result for the CPU) when handle returns.
//
// toolLog is the worker's logger with the tool's name.
func (w *Worker) handle(t *tool.Tool, toolLog *slog.Logger, msg jetstream.Msg) {
	d := &delivery{inflight: inflight{msg: msg}, tool: t, log: toolLog, slot: heldSlot{p: w.slots}}
	defer w.release(d)
	for i := range taskRules {
		if taskRules[i].apply(w, d) == settled {
			return
		}
	}
}

// release gives back what the rules took for d, in reverse order: the
// Inflight gauge's count, the deadline's timer, the heartbeat, the
// registration where cancels reach the task, its context, its span, the
// slots of its tool's limits and, last, its worker slot.
func (w *Worker) release(d *delivery) {
	if d.running {
		w.cfg.Metrics.Inflight.WithLabelValues(d.tool.Name).Dec()
	}
	if d.cancelDeadline != nil {
		d.cancelDeadline()
	}
	if d.stopHeartbeat != nil {
		d.stopHeartbeat()
		w.cancels.remove(&d.inflight)
		d.cancel(nil)
		d.span.End()
	}
	if d.holding != "" {
		w.releaseHold(d)
	}
	if q, ok := d.msg.(*queuedMsg); ok {
		w.held.remove(q.tool, q.entry.ID)
		w.kickPump(q.tool)
	}
	d.slot.release()
}

// answer settles d's delivery with res: counted, published as the task's
// result (retried, the delivery kept alive, until it is stored), then the
// delivery acked, or terminated when term (a task cancelled, or refused for
// good). The rules before run answer this way without running the tool;
// respond answers the run's outcome.
func (w *Worker) answer(d *delivery, res protocol.Result, term bool) step {
	w.count(d.tool.Name, res.Status)
	w.respond(d.log, &d.inflight, res, d.started, term)
	return settled
}

// ack settles d's delivery with an ack and no result: its attempt was
// answered before.
func (d *delivery) ack() step {
	d.settle(d.msg.Ack, d.log, "ack")
	return settled
}

// handBack settles d's delivery with a nak, no result: the task is
// delivered again after delay (at once when delay is 0).
func (d *delivery) handBack(delay time.Duration) step {
	if delay <= 0 {
		d.settle(d.msg.Nak, d.log, "nak")
	} else {
		d.settle(func() error { return d.msg.NakWithDelay(delay) }, d.log, "nak")
	}
	return settled
}

// ruleDecode: the task decodes (protocol.DecodeTask) and is for the tool
// whose consumer delivered it; else it is malformed: answered with an
// error when its IDs can be read, then terminated (Worker.malformed).
func (w *Worker) ruleDecode(d *delivery) step {
	d.md, _ = d.msg.Metadata()
	if d.md != nil && d.md.NumDelivered > 1 && w.cfg.Metrics != nil {
		w.cfg.Metrics.RedeliveriesTotal.WithLabelValues(d.tool.Name).Inc()
	}
	task, err := protocol.DecodeTask(d.msg.Data(), nil)
	if err == nil && task.Tool != d.tool.Name {
		err = fmt.Errorf("natsjs: task for tool %q delivered on the subject of %q", task.Tool, d.tool.Name)
	}
	if err != nil {
		w.malformed(d.log, d.tool, d.msg, err)
		return settled
	}
	d.task = task
	if d.md != nil && d.md.NumDelivered > 1 {
		d.log = lazylog.With(d.log, slog.String("task_id", task.TaskID), slog.String("conversation_id", task.ConversationID),
			slog.Uint64("delivery", d.md.NumDelivered))
	} else {
		d.log = lazylog.With(d.log, slog.String("task_id", task.TaskID), slog.String("conversation_id", task.ConversationID))
	}
	return next
}

// ruleHold: the task is held until its delivery is settled: traced (its
// span), registered where cancels reach it (the cancel index) and kept
// alive by in-progress acks (Worker.heartbeat). It never settles. It comes
// before the cancel look-up: a cancel stored after the look-up reaches the
// registered task through the subscription.
func (w *Worker) ruleHold(d *delivery) step {
	spanCtx, span := w.startTaskSpan(d.msg, d.task)
	if span.IsRecording() {
		sc := span.SpanContext()
		d.log = lazylog.With(d.log, slog.String("trace_id", sc.TraceID().String()), slog.String("span_id", sc.SpanID().String()))
	}
	d.ctx, d.cancel = context.WithCancelCause(spanCtx)
	d.span = span
	w.cancels.add(&d.inflight)
	d.stopHeartbeat = w.heartbeat(d.msg, d.log)
	return next
}

// ruleDeliveryLimit: a delivery past the tool's delivery limit (exhausted.go)
// is answered DeliveriesExhausted without running, then terminated.
func (w *Worker) ruleDeliveryLimit(d *delivery) step {
	limit, over := w.overLimit(d.tool.Name, d.md)
	if !over {
		return next
	}
	detail := fmt.Sprintf("delivered %d times without a result", limit)
	d.log.Warn("task exhausted its deliveries", slog.String("detail", detail))
	if err := w.deadLetter(d, protocol.ErrorDeliveriesExhausted); err != nil {
		delay := handBackDelay(d.md)
		d.log.Warn("dead letter not kept; task handed back", slog.Duration("delay", delay), slog.Any("error", err))
		return d.handBack(delay)
	}
	return w.answer(d, protocol.ResultFromOutcome(nil, &protocol.RemoteError{
		Type:    protocol.ErrorDeliveriesExhausted,
		Message: detail,
	}), true)
}

// ruleCancelled: a task cancelled before it starts (its cancel known, or
// found by a look-up in the cancel stream) is answered cancelled, then
// terminated. A failed look-up hands the task back: it does not run blind.
func (w *Worker) ruleCancelled(d *delivery) step {
	var seq uint64
	if d.md != nil {
		seq = d.md.Sequence.Stream
	}
	cancelled, err := w.cancelled(context.Background(), d.task, seq)
	if err != nil {
		// Another delivery looks again, later each time, so that an outage
		// of the cancel stream burns few deliveries.
		delay := handBackDelay(d.md)
		d.log.Warn("cancel look-up failed; task handed back", slog.Duration("delay", delay), slog.Any("error", err))
		return d.handBack(delay)
	}
	if !cancelled && !errors.Is(context.Cause(d.ctx), tool.ErrCancelled) {
		return next
	}
	d.log.Info("task cancelled before it started")
	return w.answer(d, protocol.ResultFromOutcome(nil, tool.ErrCancelled), true)
}

// ruleDeadline: a task whose deadline has passed is answered
// DeadlineExceeded without running, then acked; else its deadline ends
// its context (run answers a tool stopped by it).
func (w *Worker) ruleDeadline(d *delivery) step {
	if d.task.Deadline.IsZero() {
		return next
	}
	if !time.Now().Before(d.task.Deadline) {
		d.log.Info("task deadline passed before it started")
		return w.answer(d, protocol.ResultFromOutcome(nil, context.DeadlineExceeded), false)
	}
	d.ctx, d.cancelDeadline = context.WithDeadlineCause(d.ctx, d.task.Deadline, errDeadline)
	return next
}

// ruleAuthentication: with a task key (Config.TaskKey), an approved task
// runs only with the MAC of a dispatcher holding that key; else it is
// answered UnauthenticatedTask without running, then acked.
func (w *Worker) ruleAuthentication(d *delivery) step {
	if !d.task.Approved || w.cfg.TaskKey == nil || protocol.ValidTaskMAC(w.cfg.TaskKey, d.msg.Data(), d.msg.Headers().Get(protocol.TaskMACHeader)) {
		return next
	}
	d.log.Warn("approved task without a valid MAC refused: no agent of this store dispatched it")
	return w.answer(d, protocol.Result{Status: protocol.StatusError, ErrorType: protocol.ErrorUnauthenticatedTask,
		Message: "refused: this approved task was not dispatched by an agent of this store (no valid " + protocol.TaskMACHeader + "); the tool did not run"}, false)
}

// ruleApproval: a tool that requires approval runs only for a task that
// says it was approved (the agent sets it after a decision); an unapproved
// one is answered approval_required, then terminated (fail closed).
func (w *Worker) ruleApproval(d *delivery) step {
	if !d.tool.RequiresApproval || d.task.Approved {
		return next
	}
	d.log.Warn("task for a tool that requires approval arrived unapproved")
	return w.answer(d, protocol.ResultFromOutcome(nil, &tool.ApprovalRequired{}), true)
}

// ruleArguments: the arguments are checked against the tool's schema
// (checkArgs); invalid ones are answered retry InvalidArguments without
// running, then acked.
func (w *Worker) ruleArguments(d *delivery) step {
	if err := checkArgs(d.tool, d.task.Args); err != nil {
		d.log.Info("invalid arguments", slog.Any("error", err))
		return w.answer(d, protocol.ResultFromOutcome(nil, err), false)
	}
	return next
}

// ruleLimits: a task of a tool with limits (the tool's own and those the
// task carries, combined: SPEC §19) starts only when they allow it, across
// every replica: it holds a slot of each of its limits (given back by
// release) and charges their rates; otherwise it is queued and its
// delivery acked without a result (Worker.admit, Worker.park), to run
// later from the queue (queue.go), where it was admitted when claimed. A
// call of a tool without limits is held so too while the tool is paused
// or cools down (gate.go), and otherwise reads no state. A state that
// cannot be read hands the task back.
func (w *Worker) ruleLimits(d *delivery) step {
	if w.state == nil || d.tool.Limits == nil && d.task.Limits == nil && !w.gateClosed(d.tool.Name) {
		return next
	}
	if _, queued := d.msg.(*queuedMsg); queued {
		return next
	}
	return w.admit(d)
}

// ruleEffectLedger: the effect ledger is consulted and written before the
// tool runs (Worker.beginEffect, SPEC §13): an attempt answered before is
// acked without running; one this worker runs on another delivery is
// handed back; one started by a worker that stopped is answered
// approval_required (effect unknown) without running, then acked. An
// unavailable ledger hands the task back: a tool never runs without its
// entry.
func (w *Worker) ruleEffectLedger(d *delivery) step {
	v, effect, err := w.beginEffect(d.tool, &d.inflight, d.md)
	if err != nil {
		delay := handBackDelay(d.md)
		d.log.Warn("effect ledger unavailable; task handed back", slog.Duration("delay", delay), slog.Any("error", err))
		return d.handBack(delay)
	}
	switch v {
	case verdictAnswered:
		d.log.Info("attempt answered before: acknowledged without running")
		return d.ack()
	case verdictBusy:
		delay := handBackDelay(d.md)
		d.log.Info("attempt running here on another delivery; handed back", slog.Duration("delay", delay))
		return d.handBack(delay)
	case verdictUnknown:
		d.log.Warn("attempt started by a worker that stopped, no result stored: not run again, a person decides",
			slog.String("started_by", effect.Started.Worker), slog.Time("started_at", effect.Started.At))
		return w.answer(d, unknownEffect(effect), false)
	case verdictResume:
		d.log.Warn("attempt started by a worker that stopped, which recorded how to resume it: resumed here",
			slog.String("started_by", effect.Started.Worker), slog.Time("started_at", effect.Started.At))
		d.resume = effect.Resume
	case verdictRun:
		if effect.Started.Worker != w.cfg.ID {
			d.log.Warn("idempotent tool run again: its worker stopped while running it",
				slog.String("started_by", effect.Started.Worker), slog.Time("started_at", effect.Started.At))
		}
	}
	return next
}

// ruleRun: the tool runs (its validator, then its handler: runTool) on
// this goroutine, with the task's run context and progress reporter; a
// cancel reaches it through its context at once. Its outcome is the
// result respond publishes: cancelled when a cancel stopped it,
// DeadlineExceeded when the deadline did, else what it returned. A tool
// stopped by the worker's shutdown is handed back at once, with no result
// (its ledger entry withdrawn).
func (w *Worker) ruleRun(d *delivery) step {
	t, task := d.tool, &d.task
	rc := &tool.RunContext{
		RunID:            task.RunID,
		ConversationID:   task.ConversationID,
		Tenant:           task.Tenant,
		Agent:            task.Agent,
		ToolCallID:       task.ToolCallID,
		ToolName:         t.Name,
		ToolCallApproved: task.Approved,
		ToolCallMetadata: task.ToolCallMetadata,
		Retry:            task.Retry,
		MaxRetries:       t.Retries,
		TaskID:           task.TaskID,
		Attempt:          task.Attempt,
		IdempotencyKey:   protocol.IdempotencyKey(task.TaskID, task.Attempt),
		Background:       task.Mode == protocol.ModeBackground,
		Checkpoint:       w.checkpoint(&d.inflight),
		Resume:           d.resume,
	}
	runCtx := progress.WithReporter(d.ctx, w.reporter(task.ConversationID, task.TaskID, t.Name))
	d.started = time.Now()
	if w.cfg.Metrics != nil {
		w.cfg.Metrics.Inflight.WithLabelValues(t.Name).Inc()
		d.running = true
	}
	d.log.Debug("task started")
	toolCtx, toolSpan := w.startToolSpan(runCtx, *task)
	o := runTool(toolCtx, t, rc, task.Args, d.log)
	endToolSpan(toolSpan, o.err)
	if d.md != nil && d.md.NumPending > 0 {
		// Tasks were waiting when this one was delivered: pull the next
		// while this result is published.
		d.slot.release()
	}
	if w.cfg.Metrics != nil {
		w.cfg.Metrics.TaskDuration.WithLabelValues(t.Name).Observe(time.Since(d.started).Seconds())
	}

	cause := context.Cause(d.ctx)
	switch {
	case d.ctx.Err() != nil && errors.Is(cause, tool.ErrCancelled):
		d.log.Info("task cancelled while running")
		if w.cfg.Metrics != nil {
			w.cfg.Metrics.CancellationsTotal.WithLabelValues(t.Name).Inc()
		}
		d.out, d.term = outcome{err: cause}, true
	case d.ctx.Err() != nil && errors.Is(cause, errShutdown) && o.err != nil:
		d.log.Info("task handed back on shutdown")
		w.withdrawEffect(d.log, &d.inflight)
		return d.handBack(0)
	case errors.Is(o.err, tool.ErrWorkerFault) && d.ctx.Err() == nil:
		// What runs the tool failed under it (an MCP server died): the
		// task is handed back as if this worker had died, its ledger entry
		// kept (the next delivery applies the rules for a worker gone).
		delay := handBackDelay(d.md)
		d.log.Warn("worker fault under the tool; task handed back", slog.Duration("delay", delay), slog.Any("error", o.err))
		return d.handBack(delay)
	case d.ctx.Err() != nil && errors.Is(cause, errDeadline) && o.err != nil:
		d.log.Info("task deadline exceeded")
		d.out = outcome{err: context.DeadlineExceeded}
	default:
		if o.err != nil {
			d.log.Info("tool returned an error", slog.String("error_type", tool.ErrorType(o.err)), slog.Any("error", o.err))
		}
		d.out = w.holdAnswer(o)
	}
	return next
}

// ruleRetryAfter: a tool that says the service behind it refused the call
// for now (tool.RateLimited: a 429 or 503 with Retry-After, a command
// exiting 75) cools its tool (or its key) down on every replica, and the
// call is held, not answered: queued again (or handed back) to run after
// the cool-down, its ledger entry withdrawn, no retry of the model
// counted (Worker.retryAfter). On its last delivery it is answered
// RateLimited with retry_after, and kept as a dead letter.
func (w *Worker) ruleRetryAfter(d *delivery) step {
	var rl *tool.RateLimited
	if w.state == nil || !errors.As(d.out.err, &rl) {
		return next
	}
	return w.retryAfter(d, rl)
}

// ruleRespond: the run's outcome is published as the task's result
// (Nats-Msg-Id res:<task>:<attempt>, retried until stored), the ledger
// entry finished, then the delivery acked, or terminated when the task was
// cancelled (Worker.answer, Worker.respond).
func (w *Worker) ruleRespond(d *delivery) step {
	return w.answer(d, protocol.ResultFromOutcome(d.out.value, d.out.err), d.term)
}
