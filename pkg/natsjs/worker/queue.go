package worker

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/offload-dev/offload/pkg/limits"
	"github.com/offload-dev/offload/pkg/natsjs/internal/jsop"
	"github.com/offload-dev/offload/pkg/natsjs/internal/toolstate"
)

// queuedMsg is a call claimed from its tool's queue, as a delivery the
// rules of a task apply to like any other: acknowledging or terminating it
// removes the call from the queue (and its stored task), handing it back
// puts it back to wait; its metadata counts its deliveries, before it
// waited and since. Its claim is renewed with the worker's slots (held),
// not by in-progress acks.
type queuedMsg struct {
	w      *Worker
	tool   string
	entry  limits.Entry
	data   []byte
	header nats.Header
	md     jetstream.MsgMetadata
}

var _ jetstream.Msg = (*queuedMsg)(nil)

func (q *queuedMsg) Data() []byte                              { return q.data }
func (q *queuedMsg) Headers() nats.Header                      { return q.header }
func (q *queuedMsg) Subject() string                           { return q.w.subj.Task(q.tool) }
func (q *queuedMsg) Reply() string                             { return "" }
func (q *queuedMsg) Metadata() (*jetstream.MsgMetadata, error) { return &q.md, nil }
func (q *queuedMsg) Ack() error                                { return q.done() }
func (q *queuedMsg) DoubleAck(context.Context) error           { return q.done() }
func (q *queuedMsg) Term() error                               { return q.done() }
func (q *queuedMsg) TermWithReason(string) error               { return q.done() }
func (q *queuedMsg) Nak() error                                { return q.NakWithDelay(0) }
func (q *queuedMsg) InProgress() error                         { return nil }
func (q *queuedMsg) NakWithDelay(delay time.Duration) error    { return q.back(delay) }

// done removes the call from its queue, its slots with it, then its stored
// task: its run is settled.
func (q *queuedMsg) done() error {
	ctx, cancel := context.WithTimeout(context.Background(), jsop.Timeout)
	defer cancel()
	if _, err := q.w.state.Update(ctx, q.tool, func(st *limits.State) error {
		st.Remove(q.entry.ID)
		st.Prune(time.Now())
		return nil
	}); err != nil {
		return err
	}
	if err := q.w.state.DeleteTask(ctx, q.tool, q.entry.Task, q.entry.Attempt); err != nil {
		q.w.log.Debug("queued task not deleted; it ages out", slog.String("tool", q.tool), slog.Any("error", err))
	}
	return nil
}

// back puts the call back to wait, not before delay from now.
func (q *queuedMsg) back(delay time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), jsop.Timeout)
	defer cancel()
	var nb time.Time
	if delay > 0 {
		nb = time.Now().Add(delay)
	}
	_, err := q.w.state.Update(ctx, q.tool, func(st *limits.State) error {
		if !st.Unclaim(q.entry.ID, nb) {
			return toolstate.ErrNoChange
		}
		return nil
	})
	q.w.kickPump(q.tool)
	return err
}

// pump claims the calls of one tool's queue that may start, one per slot
// of the worker, and hands them to the tool's runners: woken when this
// worker queued a call or gave slots back, when the state said something
// may start (a rate, a cool-down, a claim lapsing), and at least every
// second while calls wait (every ten otherwise: a replica that queued one
// may have stopped).
type pump struct {
	w    *Worker
	part *toolPart
	rs   *runnerPool
	kick chan struct{}
}

// kickPump wakes tool's pump, if any.
func (w *Worker) kickPump(toolName string) {
	if pt := w.partOf(toolName); pt != nil && pt.pump != nil {
		select {
		case pt.pump.kick <- struct{}{}:
		default: // woken already
		}
	}
}

// run runs the pump until its tool's part stops fetching.
func (p *pump) run() {
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		kicked := false
		select {
		case <-p.kick:
			kicked = true
		case <-timer.C:
		case <-p.part.ctx.Done():
			return
		}
		wait := p.drain(kicked)
		if p.part.ctx.Err() != nil {
			return
		}
		if !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
		timer.Reset(wait)
	}
}

// drain claims the calls that may start now while the worker has slots
// for them, and returns how long to wait before looking again. Woken by a
// kick (a write of the state, which its gate saw, or a change of this
// worker's), it looks first at the state as its gate last saw it; on its
// timer, it reads the state (a write missed while disconnected).
func (p *pump) drain(kicked bool) time.Duration {
	w := p.w
	for {
		var st *limits.State
		if v := p.part.gate.view(); kicked && v != nil {
			st = v.Clone() // the gate's is not to be changed
		} else {
			ctx, cancel := w.stateCtx()
			var err error
			st, _, err = w.state.Load(ctx, p.part.name)
			cancel()
			if err != nil {
				w.log.Warn("the tool's queue could not be read", slog.String("tool", p.part.name), slog.Any("error", err))
				return pumpRetryWait
			}
		}
		kicked = true // after a claim, its state is the gate's view
		now := time.Now()
		st.Prune(now)
		i, wake := st.Next(now)
		w.observe(p.part.name, st, now) // not changed after: its gate keeps it
		if i < 0 {
			return p.waitFor(wake, now, len(st.Queue) > 0)
		}
		free := p.rs.n - int(p.rs.busy.Load())
		if free <= 0 {
			return pumpMinWait * 20 // every runner is busy: look again soon
		}
		if err := w.slots.acquireQueued(p.part.ctx, p.part.name); err != nil {
			return 0 // stopping
		}
		n := 1 + w.slots.tryAcquire(free-1)
		msgs, err := p.claim(n)
		for range n - len(msgs) {
			w.slots.release()
		}
		for _, msg := range msgs {
			w.held.add(p.part.name, msg.entry.ID)
			p.rs.busy.Add(1)
			select {
			case p.rs.tasks <- msg:
			case <-p.part.ctx.Done():
				_ = msg.Nak()
				w.held.remove(p.part.name, msg.entry.ID)
				w.slots.release()
				p.rs.done()
			}
		}
		if err != nil {
			w.log.Warn("a queued call could not be claimed", slog.String("tool", p.part.name), slog.Any("error", err))
			return pumpRetryWait
		}
		if p.part.ctx.Err() != nil {
			return 0
		}
	}
}

// waitFor returns how long to wait before looking again: until wake, or
// at most a second while calls wait (ten seconds otherwise).
func (p *pump) waitFor(wake, now time.Time, waiting bool) time.Duration {
	most := pumpIdle
	if waiting || p.part.tool.Load().Limits != nil {
		most = pumpActive
	}
	if d := time.Duration(p.w.pumpLook.Load()); d > 0 {
		most = d
	}
	if wake.IsZero() {
		return most
	}
	return min(max(wake.Sub(now), pumpMinWait), most)
}

// claim claims, by one change of the state, up to n calls that may
// start (in the order of limits.State.Next) and returns them as
// deliveries with their stored tasks; none when none may (another replica
// claimed them first). A claimed call whose task is gone is removed; one
// whose task cannot be read waits again a second.
func (p *pump) claim(n int) ([]*queuedMsg, error) {
	w := p.w
	ctx, cancel := w.stateCtx()
	defer cancel()
	var claimed []limits.Entry
	now := time.Now()
	st, err := w.state.Update(ctx, p.part.name, func(st *limits.State) error {
		claimed = claimed[:0]
		st.Prune(now)
		for range n {
			i, _ := st.Next(now)
			if i < 0 {
				break
			}
			claimed = append(claimed, st.Claim(i, w.cfg.ID, now, w.lease))
		}
		if len(claimed) == 0 {
			return toolstate.ErrNoChange
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	w.observe(p.part.name, st, now)
	var out []*queuedMsg
	var gone, unread []string
	var errs []error
	for _, e := range claimed {
		m, err := w.state.GetTask(ctx, p.part.name, e.Task, e.Attempt)
		switch {
		case err != nil:
			unread = append(unread, e.ID)
			errs = append(errs, err)
		case m == nil:
			gone = append(gone, e.ID)
			w.log.Warn("a queued call's task is gone; removed from the queue", slog.String("tool", p.part.name), slog.String("task_id", e.Task))
		default:
			q := &queuedMsg{w: w, tool: p.part.name, entry: e, data: m.Data, header: keptHeaders(m.Header)}
			q.md = jetstream.MsgMetadata{NumDelivered: uint64(max(e.Deliveries, 1)), Timestamp: e.Since, Stream: w.names.QueueStream}
			out = append(out, q)
		}
	}
	if len(gone)+len(unread) > 0 {
		_, uerr := w.state.Update(ctx, p.part.name, func(st *limits.State) error {
			for _, id := range gone {
				st.Remove(id) // nothing to run: its task is gone
			}
			for _, id := range unread {
				st.Unclaim(id, time.Now().Add(claimRetryDelay))
			}
			return nil
		})
		errs = append(errs, uerr)
	}
	return out, errors.Join(errs...)
}
