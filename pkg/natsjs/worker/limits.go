package worker

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/offload-dev/offload/pkg/limits"
	"github.com/offload-dev/offload/pkg/natsjs"
	"github.com/offload-dev/offload/pkg/natsjs/internal/jsop"
	"github.com/offload-dev/offload/pkg/natsjs/internal/toolstate"
	"github.com/offload-dev/offload/pkg/protocol"
	"github.com/offload-dev/offload/pkg/telemetry"
	"github.com/offload-dev/offload/pkg/tool"
)

// Fleet control (SPEC §19). A task of a tool with limits (the tool's own,
// tool.Tool.Limits, combined with the agent's that the task carries) is
// admitted by compare-and-set of the tool's state, shared by every
// replica (limits.State, the key <tool>.state of the limits bucket): it
// runs at once, holding a leased slot of each of its limits and charging
// their rates, when nothing holds it and no call that waits goes first;
// otherwise it is parked: stored as delivered in the queue bucket, added
// to the state's queue, and its delivery acknowledged. A pump per tool
// (queue.go) claims the waiting calls in order (priority, fairness,
// arrival) as limits and slots allow, and runs them through the same
// rules, from the queue. The slots and claims a worker holds are leases,
// renewed while it runs them: a worker killed holding one lets it lapse.

// DefaultSlotLease is how long a slot or a claim of a worker lasts without
// being renewed; renewed every third of it while the call runs.
const DefaultSlotLease = 30 * time.Second

// Timings of the limits.
const (
	parkedNakDelay  = 5 * time.Second // a call whose queue is full is handed back, and tried again after this
	pumpIdle        = 10 * time.Second
	pumpActive      = time.Second // a pump looks again at most this late while calls wait
	pumpMinWait     = 5 * time.Millisecond
	pumpRetryWait   = time.Second // after the state could not be read
	claimRetryDelay = time.Second // a claimed call whose task could not be read waits this long
)

// callOf is what a task's limits are keyed by.
func callOf(t *protocol.Task) limits.Call {
	return limits.Call{Args: t.Args, Conversation: t.ConversationID, Agent: t.Agent, Tenant: t.Tenant}
}

// planOf returns the plan of the task d holds: the tool's limits and the
// task's, combined.
func planOf(d *delivery) limits.Plan {
	return limits.Combine(callOf(&d.task), d.tool.Limits, d.task.Limits)
}

// held are the slots and claims a worker holds, by tool: what its lease
// renewer renews.
type held struct {
	mu  sync.Mutex
	ids map[string]map[string]bool
}

func (h *held) add(tool, id string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.ids == nil {
		h.ids = map[string]map[string]bool{}
	}
	if h.ids[tool] == nil {
		h.ids[tool] = map[string]bool{}
	}
	h.ids[tool][id] = true
}

func (h *held) remove(tool, id string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.ids[tool], id)
	if len(h.ids[tool]) == 0 {
		delete(h.ids, tool)
	}
}

// snapshot returns a copy of the held IDs, by tool.
func (h *held) snapshot() map[string]map[string]bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make(map[string]map[string]bool, len(h.ids))
	for tool, ids := range h.ids {
		c := make(map[string]bool, len(ids))
		for id := range ids {
			c[id] = true
		}
		out[tool] = c
	}
	return out
}

// stateCtx bounds one change of a tool's state.
func (w *Worker) stateCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(w.hardCtx, jsop.Timeout)
}

// admit applies the tool's limits to the task d holds, which was not
// waiting in the queue: it passes on, holding its slots, when it may start
// now; it is acknowledged when it waits in the queue already (a
// redelivery of a parked call); otherwise it is parked.
func (w *Worker) admit(d *delivery) step {
	plan := planOf(d)
	if !plan.Limited() && !w.gateClosed(d.tool.Name) {
		return next
	}
	id := limits.ID(d.task.TaskID, d.task.Attempt)
	now := time.Now()
	if reason := w.mustWait(d, plan, id, now); reason != "" {
		// The state as this worker last saw it holds the call (a flood of
		// one key behind its limit): it is parked at once, which admits it
		// still if the state says otherwise by then, rather than read
		// first only to be refused.
		return w.park(d, plan, id, reason, time.Time{})
	}
	var reason string
	var dup bool
	ctx, cancel := w.stateCtx()
	st, err := w.state.Update(ctx, d.tool.Name, func(st *limits.State) error {
		reason, dup = "", false
		st.Prune(now)
		if _, ok := st.Get(id); ok {
			dup = true
			return toolstate.ErrNoChange
		}
		if reason = st.Admit(plan, id, w.cfg.ID, now, w.lease); reason != "" {
			return toolstate.ErrNoChange
		}
		return nil
	})
	cancel()
	if err != nil {
		delay := handBackDelay(d.md)
		d.log.Warn("the tool's limits could not be read; task handed back", slog.Duration("delay", delay), slog.Any("error", err))
		return d.handBack(delay)
	}
	w.observe(d.tool.Name, st, now)
	switch {
	case dup:
		d.log.Info("a delivery of a call that waits in its queue: acknowledged")
		return d.ack()
	case reason == "":
		d.holding = id
		w.held.add(d.tool.Name, id)
		return next
	}
	return w.park(d, plan, id, reason, time.Time{})
}

// mustWait returns why the call id of plan p must wait at now by the
// state of its tool as this worker last saw it (its gate's view): "" when
// it may start, as far as the view says, or there is no view. A call
// parked already (a redelivery) is left to admit, which acknowledges it.
func (w *Worker) mustWait(d *delivery, p limits.Plan, id string, now time.Time) string {
	pt := w.partOf(d.tool.Name)
	if pt == nil {
		return ""
	}
	v := pt.gate.view()
	if v == nil {
		return ""
	}
	if _, ok := v.Get(id); ok {
		return ""
	}
	return v.MustWait(p, id, now)
}

// park stores the task d holds in its tool's queue, not to start before
// notBefore (zero: as soon as it may), and acknowledges its delivery. When
// it may start after all (a slot freed meanwhile, no notBefore), it runs
// instead, unless it gave its worker slot back to pull the next task of a
// backlog. A queue that cannot take it hands the task back.
func (w *Worker) park(d *delivery, plan limits.Plan, id, reason string, notBefore time.Time) step {
	early := d.md != nil && d.md.NumPending > 0 && !d.slot.released
	if early {
		// Tasks were waiting when this one was delivered (a flood): pull
		// the next while this one is parked, as ruleRun does while a
		// result is published (the runners outnumber the slots for that).
		// Holding no slot, it is then parked even if it may start by
		// then: the pump, woken, claims it with a slot.
		d.slot.release()
	}
	ctx, cancel := w.stateCtx()
	defer cancel()
	if err := w.state.PutTask(ctx, d.tool.Name, d.task.TaskID, d.task.Attempt, d.msg.Data(), keptHeaders(d.msg.Headers())); err != nil {
		delay := handBackDelay(d.md)
		d.log.Warn("the task could not be queued; handed back", slog.Duration("delay", delay), slog.Any("error", err))
		return d.handBack(delay)
	}
	deliveries := 1
	now := time.Now()
	since := now // arrival: when the server stored the task, so that the queue keeps the order the tasks were stored in
	if d.md != nil {
		deliveries = int(d.md.NumDelivered) //nolint:gosec // G115: a count of deliveries
		if !d.md.Timestamp.IsZero() && d.md.Timestamp.Before(now) {
			since = d.md.Timestamp
		}
	}
	var admitted, parked bool
	var blocked string
	st, err := w.state.Update(ctx, d.tool.Name, func(st *limits.State) error {
		admitted, parked, blocked = false, false, ""
		st.Prune(now)
		if _, ok := st.Get(id); ok {
			return nil // parked already: by an earlier delivery (its claim, if it runs, kept whole)
		}
		st.Release(id) // a call held again after it ran (retry after)
		if notBefore.IsZero() && !early {
			if reason = st.Admit(plan, id, w.cfg.ID, now, w.lease); reason == "" {
				admitted = true
				return nil
			}
		}
		_, blocked, _ = st.BlockedBy(plan, now)
		if _, err := st.Park(limits.Entry{ID: id, Task: d.task.TaskID, Attempt: d.task.Attempt, Conversation: d.task.ConversationID,
			Agent: d.task.Agent, Tenant: d.task.Tenant, Plan: plan, Since: since, NotBefore: notBefore, Deliveries: deliveries, Reason: reason}); err != nil {
			return err
		}
		parked = true
		return nil
	})
	if err != nil {
		w.withdrawQueued(d)
		delay := handBackDelay(d.md)
		if errors.Is(err, limits.ErrQueueFull) {
			delay = parkedNakDelay
		}
		d.log.Warn("the task could not be queued; handed back", slog.Duration("delay", delay), slog.Any("error", err))
		return d.handBack(delay)
	}
	w.observe(d.tool.Name, st, now)
	if admitted {
		w.withdrawQueued(d)
		d.holding = id
		w.held.add(d.tool.Name, id)
		return next
	}
	d.holding = ""
	if parked {
		w.countLimited(d.tool.Name, reason)
		q := protocol.Queued{Reason: reason, Ahead: st.Ahead(id, now), Key: blocked}
		if reason == limits.ReasonCoolDown {
			q.Until = notBefore
		}
		w.reportQueued(&d.task, d.tool.Name, q)
		d.log.Info("task queued", slog.String("reason", reason), slog.Int("ahead", q.Ahead))
	}
	w.kickPump(d.tool.Name)
	return d.ack()
}

// withdrawQueued deletes the stored task of d from the queue (it runs, or
// waits where it was): best effort, the bucket's max age drops it
// otherwise.
func (w *Worker) withdrawQueued(d *delivery) {
	ctx, cancel := w.stateCtx()
	defer cancel()
	if err := w.state.DeleteTask(ctx, d.tool.Name, d.task.TaskID, d.task.Attempt); err != nil {
		d.log.Debug("queued task not withdrawn", slog.Any("error", err))
	}
}

// keptHeaders are the headers of a task kept with it in the queue: those
// a later delivery reads.
func keptHeaders(h nats.Header) nats.Header {
	out := nats.Header{}
	for _, k := range []string{protocol.TaskMACHeader, protocol.IdempotencyKeyHeader, protocol.TenantHeader,
		telemetry.TraceparentHeader, telemetry.TracestateHeader} {
		if v := h.Values(k); len(v) > 0 {
			out[k] = v
		} else if v := h.Get(k); v != "" { // set in another case by hand
			out.Set(k, v)
		}
	}
	return out
}

// releaseHold gives back the slots the task d holds, admitted at its
// delivery (its rules are done), and wakes the tool's pump when calls
// wait.
func (w *Worker) releaseHold(d *delivery) {
	id := d.holding
	d.holding = ""
	w.held.remove(d.tool.Name, id)
	ctx, cancel := context.WithTimeout(context.Background(), jsop.Timeout)
	defer cancel()
	waiting := false
	_, err := w.state.Update(ctx, d.tool.Name, func(st *limits.State) error {
		waiting = len(st.Queue) > 0
		st.Release(id)
		st.Prune(time.Now())
		return nil
	})
	if err != nil {
		d.log.Warn("the call's slots not given back; they lapse with their lease", slog.Any("error", err))
	}
	if waiting {
		w.kickPump(d.tool.Name)
	}
}

// renewLeases renews the slots and claims this worker holds, every third
// of the lease, until the worker stops.
func (w *Worker) renewLeases() {
	defer w.periodic.Done()
	tick := time.NewTicker(w.lease / 3)
	defer tick.Stop()
	for {
		select {
		case <-tick.C:
			for toolName, ids := range w.held.snapshot() {
				ctx, cancel := w.stateCtx()
				now := time.Now()
				st, err := w.state.Update(ctx, toolName, func(st *limits.State) error {
					if st.Renew(w.cfg.ID, ids, now.Add(w.lease)) == 0 {
						return toolstate.ErrNoChange
					}
					return nil
				})
				cancel()
				if err != nil {
					w.log.Warn("slots not renewed", slog.String("tool", toolName), slog.Any("error", err))
					continue
				}
				w.observe(toolName, st, now)
			}
		case <-w.bgStop:
			return
		}
	}
}

// observe records what a tool's state says in the metrics.
func (w *Worker) observe(toolName string, st *limits.State, now time.Time) {
	if p := w.partOf(toolName); p != nil && p.gate != nil && st != nil {
		p.gate.set(st)
	}
	if w.cfg.Metrics == nil || st == nil {
		return
	}
	w.cfg.Metrics.ToolQueued.WithLabelValues(toolName).Set(float64(st.Waiting(now)))
	cool, _ := st.CoolUntil(now)
	w.cfg.Metrics.ToolCooldown.WithLabelValues(toolName).Set(max(cool.Sub(now).Seconds(), 0))
}

func (w *Worker) countLimited(toolName, reason string) {
	if w.cfg.Metrics != nil {
		w.cfg.Metrics.ToolLimitedTotal.WithLabelValues(toolName, reason).Inc()
	}
}

// reportQueued tells whoever follows the task's progress that it waits
// (SPEC §19): a progress report whose message says why and behind how
// many, best effort.
func (w *Worker) reportQueued(task *protocol.Task, toolName string, q protocol.Queued) {
	data, err := json.Marshal(protocol.Progress{TaskID: task.TaskID, Message: q.Text(toolName), At: time.Now().UTC(), Queued: &q})
	if err == nil {
		err = w.cfg.Conn.Publish(w.subj.Progress(task.ConversationID, task.TaskID, toolName), data)
	}
	if err != nil {
		w.log.Debug("queued report not published", slog.String("task_id", task.TaskID), slog.Any("error", err))
	}
}

// coolDown holds the calls of bucket b of tool toolName until until, on
// every replica: in the tool's state and, for the tool's own bucket, by
// pausing its task consumer until then too (unless an operator paused it
// for longer), so that no replica is delivered one meanwhile.
func (w *Worker) coolDown(toolName, b string, until time.Time) {
	ctx, cancel := w.stateCtx()
	defer cancel()
	st, err := w.state.Update(ctx, toolName, func(st *limits.State) error {
		st.CoolDown(b, until)
		return nil
	})
	if err != nil {
		w.log.Warn("cool-down not shared", slog.String("tool", toolName), slog.Any("error", err))
		return
	}
	w.observe(toolName, st, time.Now())
	if b != "" {
		return
	}
	pauseUntil := until
	if p := st.Pause; p.Active(time.Now()) {
		if p.Until.IsZero() || p.Until.After(until) {
			return // the operator's pause holds longer
		}
	}
	if _, err := w.js.PauseConsumer(ctx, w.names.Tasks, natsjs.TaskConsumerName(toolName), pauseUntil); err != nil {
		w.log.Warn("task consumer not paused for the cool-down; the calls delivered meanwhile wait in the queue", slog.String("tool", toolName), slog.Any("error", err))
	}
}

// retryAfter holds the call d ran, which the service behind its tool
// refused for rl.After (ruleRetryAfter).
func (w *Worker) retryAfter(d *delivery, rl *tool.RateLimited) step {
	until := time.Now().Add(rl.After)
	plan := planOf(d)
	w.coolDown(d.tool.Name, plan.Cool, until)
	w.countLimited(d.tool.Name, limits.ReasonCoolDown)
	if limit, _ := w.overLimit(d.tool.Name, d.md); d.md != nil && limit > 0 && d.md.NumDelivered >= uint64(limit) {
		d.log.Warn("rate limited on its last delivery: answered RateLimited", slog.Duration("retry_after", rl.After))
		if err := w.deadLetter(d, protocol.ErrorRateLimited); err != nil {
			d.log.Warn("dead letter not kept", slog.Any("error", err))
		}
		return next
	}
	d.log.Info("rate limited: the call runs again after the cool-down", slog.Duration("retry_after", rl.After))
	w.withdrawEffect(d.log, &d.inflight)
	q := protocol.Queued{Reason: limits.ReasonCoolDown, Until: until, Key: plan.Cool}
	if _, queued := d.msg.(*queuedMsg); queued || !plan.Limited() {
		w.reportQueued(&d.task, d.tool.Name, q)
		return d.handBack(rl.After)
	}
	return w.park(d, plan, limits.ID(d.task.TaskID, d.task.Attempt), limits.ReasonCoolDown, until)
}
