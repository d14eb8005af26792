package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"sync"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/trace"

	"github.com/offload-dev/offload/pkg/natsjs/internal/direct"
	"github.com/offload-dev/offload/pkg/natsjs/internal/jsop"
	"github.com/offload-dev/offload/pkg/protocol"
	"github.com/offload-dev/offload/pkg/tool"
)

// maxCancelSeen bounds the cancels remembered in memory.
const maxCancelSeen = 100_000

// inflight is a task this worker holds.
type inflight struct {
	task   protocol.Task
	msg    jetstream.Msg
	cancel context.CancelCauseFunc
	span   trace.Span  // the task's span (its result carries its trace context)
	once   sync.Once   // the delivery is settled (ack, term or nak) once
	effect *effectHold // the attempt's ledger entry, once this delivery holds it: set under cancelIndex.mu (hold), read there by other deliveries
}

// settle runs f (an ack, term or nak of the delivery) unless the delivery
// was settled already, and reports whether it ran.
func (fl *inflight) settle(f func() error, log *slog.Logger, what string) bool {
	ran := false
	fl.once.Do(func() {
		ran = true
		if err := f(); err != nil {
			log.Warn(what+" failed", slog.Any("error", err))
		}
	})
	return ran
}

// cancelIndex knows which tasks were cancelled, and which tasks this worker
// holds, so that a cancel reaches a running tool at once and a cancelled
// task never starts (SPEC §5.3).
//
// A cancel is always stored after its task. While the connection is up,
// the cancel subscription sees every cancel as it is stored: a task stored
// after the subscription was last known complete (its stream sequence above
// the trust point) is answered from memory; any other task is looked up in
// the cancel stream. A disconnect (or a slow-consumer drop, which makes the
// server disconnect the worker) withdraws the trust until the worker has
// caught up: resubscribed, looked up the cancels of the tasks it holds, and
// set a new trust point.
type cancelIndex struct {
	mu        sync.Mutex
	seen      map[string]struct{} // "<conv>.<task>"
	order     []string            // seen, oldest first
	trustFrom uint64              // tasks with a higher stream sequence need no look-up
	overflow  bool                // memory forgot cancels: trust nothing any more
	gen       uint64              // incremented on every disconnect
	running   map[*inflight]struct{}
}

func newCancelIndex() *cancelIndex {
	return &cancelIndex{
		seen:      map[string]struct{}{},
		trustFrom: math.MaxUint64,
		running:   map[*inflight]struct{}{},
	}
}

func cancelKey(conv, task string) string { return conv + "." + task }

// record remembers a cancel and returns the held tasks it names.
func (c *cancelIndex) record(conv, task string) []*inflight {
	c.mu.Lock()
	defer c.mu.Unlock()
	key := cancelKey(conv, task)
	if _, ok := c.seen[key]; !ok {
		c.seen[key] = struct{}{}
		c.order = append(c.order, key)
		if len(c.order) > maxCancelSeen {
			// Forget the oldest half; from now on tasks are looked up.
			for _, k := range c.order[:maxCancelSeen/2] {
				delete(c.seen, k)
			}
			c.order = slices.Clone(c.order[maxCancelSeen/2:])
			c.overflow = true
			c.trustFrom = math.MaxUint64
		}
	}
	var out []*inflight
	for fl := range c.running {
		if fl.task.TaskID == task && fl.task.ConversationID == conv {
			out = append(out, fl)
		}
	}
	return out
}

// check reports whether a cancel of the task stored at stream sequence seq
// is known, or else whether it must be looked up in the cancel stream.
func (c *cancelIndex) check(conv, task string, seq uint64) (cancelled, lookup bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.seen[cancelKey(conv, task)]; ok {
		return true, false
	}
	return false, seq == 0 || seq <= c.trustFrom
}

// epoch returns the current connection generation, to be given to trust.
func (c *cancelIndex) epoch() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.gen
}

// distrust withdraws the trust point: every task is looked up until the
// worker has caught up.
func (c *cancelIndex) distrust() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen++
	c.trustFrom = math.MaxUint64
}

// trust sets the trust point to seq, unless the connection dropped since
// gen was read (or memory overflowed); it reports whether it did.
func (c *cancelIndex) trust(seq, gen uint64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.gen != gen {
		return false
	}
	if !c.overflow {
		c.trustFrom = seq
	}
	return true
}

// add registers a held task; remove forgets it.
func (c *cancelIndex) add(fl *inflight) {
	c.mu.Lock()
	c.running[fl] = struct{}{}
	c.mu.Unlock()
}

func (c *cancelIndex) remove(fl *inflight) {
	c.mu.Lock()
	delete(c.running, fl)
	c.mu.Unlock()
}

// hold records that fl holds its attempt's ledger entry h: under the
// index's lock, because another delivery of the same attempt on this
// worker reads it there (runsAttempt) while fl's tool runs.
func (c *cancelIndex) hold(fl *inflight, h *effectHold) {
	c.mu.Lock()
	fl.effect = h
	c.mu.Unlock()
}

// runsAttempt reports whether another delivery of fl's attempt is held
// here with its ledger entry (its tool running).
func (c *cancelIndex) runsAttempt(fl *inflight) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for o := range c.running {
		if o != fl && o.effect != nil && o.task.TaskID == fl.task.TaskID && o.task.Attempt == fl.task.Attempt {
			return true
		}
	}
	return false
}

// held returns the tasks held.
func (c *cancelIndex) held() []*inflight {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]*inflight, 0, len(c.running))
	for fl := range c.running {
		out = append(out, fl)
	}
	return out
}

// handBackAll naks every held task not settled yet and returns how many.
func (c *cancelIndex) handBackAll() int {
	n := 0
	for _, fl := range c.held() {
		if fl.settle(fl.msg.Nak, slog.New(slog.DiscardHandler), "nak") {
			n++
		}
	}
	return n
}

// subscribeCancels subscribes to the cancels of the tool named,
// <prefix>.cancel.*.*.<tool> (the subjects a worker's credential may read,
// SPEC §9). The subscription never drops messages in the client (no
// pending limits); a server that finds the worker too slow disconnects it,
// which the connection watcher handles like any disconnect. A
// subscription made and not set up is returned with the error.
func (w *Worker) subscribeCancels(name string) (*nats.Subscription, error) {
	subject := w.subj.OfTool(protocol.KindCancel, name)
	sub, err := w.cfg.Conn.Subscribe(subject, func(m *nats.Msg) { w.onCancel(m, name) })
	if err != nil {
		return nil, fmt.Errorf("natsjs: worker: subscribe to cancellations on %s: %w", subject, err)
	}
	if err := sub.SetPendingLimits(-1, -1); err != nil {
		return sub, fmt.Errorf("natsjs: worker: cancellations on %s: %w", subject, err)
	}
	return sub, nil
}

// onCancel records a cancel of a task of the tool named (its
// subscription's) and cancels the held task it names.
func (w *Worker) onCancel(m *nats.Msg, name string) {
	kind, conv, taskID, toolName, err := w.subj.Parse(m.Subject)
	if err != nil || kind != protocol.KindCancel || toolName != name {
		w.log.Debug("ignored cancel on an invalid subject", slog.String("subject", m.Subject))
		return
	}
	var reason cancelReason
	if c, err := protocol.DecodeCancel(m.Data, taskID, nil); err == nil {
		reason = cancelReason(c.Reason)
	}
	for _, fl := range w.cancels.record(conv, taskID) {
		w.log.Info("cancel received", slog.String("task_id", taskID), slog.String("reason", string(reason)))
		fl.cancel(reason)
	}
}

// cancelReason is the cause of a task cancelled by a cancel message: its
// reason, which the cancelled result carries back to the agent. It matches
// tool.ErrCancelled.
type cancelReason string

func (r cancelReason) Error() string {
	if r == "" {
		return tool.ErrCancelled.Error()
	}
	return string(r)
}

// Is makes a cancelReason match tool.ErrCancelled.
func (r cancelReason) Is(target error) bool { return target == tool.ErrCancelled }

// errLookup wraps a failed cancel look-up: the task is handed back, not run.
var errLookup = errors.New("natsjs: cancel look-up failed")

// cancelled reports whether a cancel for task (stored at stream sequence
// seq) is stored, from memory when the index can tell, else with a look-up
// in the cancel stream. A failed look-up is an error wrapping errLookup.
func (w *Worker) cancelled(ctx context.Context, task protocol.Task, seq uint64) (bool, error) {
	known, lookup := w.cancels.check(task.ConversationID, task.TaskID, seq)
	if p := w.partOf(task.Tool); !known && !lookup && p != nil && seq <= p.floor {
		lookup = true // stored before the tool's part subscribed to its cancels
	}
	if known || !lookup {
		return known, nil
	}
	return w.lookupCancel(ctx, task)
}

func (w *Worker) lookupCancel(ctx context.Context, task protocol.Task) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, jsop.Timeout)
	defer cancel()
	m, err := direct.Last(ctx, w.cfg.Conn, w.names.Cancel, w.subj.Cancel(task.ConversationID, task.TaskID, task.Tool))
	switch {
	case err != nil:
		return false, fmt.Errorf("%w: %w", errLookup, err)
	case m == nil:
		return false, nil
	default:
		w.cancels.record(task.ConversationID, task.TaskID)
		return true, nil
	}
}
