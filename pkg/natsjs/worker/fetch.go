package worker

import (
	"errors"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/offload-dev/offload/pkg/tool"
)

// fetch pulls the tasks of one tool for as many slots as are free: a pull
// request is issued only for slots held, and asks for one task per slot,
// so no task waits in this process while another replica could run it
// (see [slotPool] for how slots rotate among the tools). While tasks are
// waiting in the consumer, a slot freed while requests are outstanding is
// asked for at once, in a request of its own with every other slot then
// free, rather than once they have been answered: it waits one round trip
// for its next task, not that plus the rest of another request's. Without
// a backlog the freed slots are asked for together once the outstanding
// requests end, so that an idle worker keeps few requests waiting. Each
// task pulled is handed, with its slot, to an idle runner of the tool (see
// run); a runner is a long-lived goroutine that has grown its stack once,
// where a goroutine per task would grow a fresh one for every task (schema
// validation and JSON decoding go deep).
//
// A task is pulled only when a runner is free to start it: a runner whose
// result cannot be published keeps retrying after its slot was given back
// (see handle), and a task handed over to no free runner would wait,
// without in-progress acks, until another replica got it after its ack
// wait.
func (w *Worker) fetch(t *tool.Tool, c jetstream.Consumer, rs *runners) {
	defer w.fetchers.Done()
	info := c.CachedInfo()
	p := newPuller(w.cfg.Conn, info.Stream, info.Name, w.cfg.Concurrency)
	freed := w.slots.watch()
	defer w.slots.unwatch(freed)

	// While a long request may be outstanding, a fetcher of another tool
	// that has to wait for a slot may preempt this one (close preempt):
	// every request is then abandoned, and their slots given back.
	var pl *pull
	preempt := make(chan struct{})
	unregister := func() {
		if pl != nil {
			w.slots.endPull(pl)
			pl = nil
		}
		select {
		case <-preempt: // preempted meanwhile
			preempt = make(chan struct{})
		default:
		}
	}
	abandon := func() {
		unregister()
		for range p.abandon() {
			w.slots.release()
		}
	}
	defer abandon()

	// No message at all for a request's expiry and a second while
	// requests are outstanding means the server lost them (a restart):
	// they are abandoned.
	guard := time.NewTimer(pullWait)
	defer guard.Stop()
	lostAfter := func() time.Duration {
		if pl != nil { // long requests may be outstanding
			return pullWait + time.Second
		}
		return shortPull + time.Second
	}

	handoff := func(msg jetstream.Msg) {
		rs.busy.Add(1)
		select {
		case rs.tasks <- msg:
		case <-w.fetchCtx.Done():
			// Stopping: hand the task back at once.
			_ = msg.Nak()
			w.slots.release()
			rs.done()
		}
	}
	backlog := false // tasks were waiting at the last delivery
	reconn := w.reconnected()
	for {
		// Ask for every free slot, waiting for one while none is held.
		// While requests are outstanding, freed slots are asked for only
		// when tasks were waiting at the last delivery: otherwise the next
		// task goes to an outstanding request anyway, and the freed slots
		// are asked for together once those requests end. Never more are
		// asked for than runners are free for tasks not asked for yet
		// (spare).
		spare := rs.n - int(rs.busy.Load()) - p.held
		if p.held == 0 && spare <= 0 {
			// Every runner is busy (retrying results): pull nothing.
			select {
			case <-rs.idle:
				continue
			case <-w.fetchCtx.Done():
				return
			}
		}
		n := 0
		if p.held == 0 {
			if err := w.slots.acquire(w.fetchCtx, t.Name); err != nil {
				return
			}
			n = 1
		}
		if room := min(w.cfg.Concurrency-p.held, spare) - n; room > 0 && (n > 0 || backlog) {
			n += w.slots.tryAcquire(room)
		}
		if n > 0 {
			long := w.slots.longPull(t.Name)
			expires := shortPull
			if long {
				expires = pullWait
			}
			if err := p.request(n, expires); err != nil {
				for range n {
					w.slots.release()
				}
				abandon()
				w.log.Warn("pull failed", slog.String("tool", t.Name), slog.Any("error", err))
				if !w.sleep(fetchRetryWait) {
					return
				}
				continue
			}
			if long && pl == nil {
				ch := preempt
				pl = w.slots.startPull(func() { close(ch) }, t.Name)
			}
			guard.Reset(lostAfter())
		}
		select {
		case <-reconn:
			// The server may have restarted, forgetting the requests: ask
			// again rather than wait for their expiry, since the answers to
			// new ones would hide that the old ones are lost.
			reconn = w.reconnected()
			abandon()
		case m := <-p.msgs:
			task, n, err := p.receive(m)
			for range n {
				w.slots.release()
			}
			switch {
			case errors.Is(err, errUncounted) && task != nil:
				_ = task.Nak() // no slot was asked for it
				w.log.Warn("pull failed", slog.String("tool", t.Name), slog.Any("error", err))
				abandon()
			case err != nil:
				w.log.Warn("pull failed", slog.String("tool", t.Name), slog.Any("error", err))
				abandon()
				if !errors.Is(err, errUncounted) && !w.sleep(fetchRetryWait) {
					return
				}
			case task != nil:
				md, err := task.Metadata()
				backlog = err == nil && md.NumPending > 0
				handoff(task)
			}
			if p.held == 0 {
				unregister()
			} else {
				guard.Reset(lostAfter())
			}
		case <-freed:
		case <-rs.idle:
		case <-preempt:
			abandon()
		case <-guard.C:
			if p.held > 0 {
				w.log.Debug("pull requests unanswered; asking again", slog.String("tool", t.Name))
				abandon()
			}
		case <-w.fetchCtx.Done():
			return
		}
	}
}

// sleep waits d, or less if the worker stops; it reports whether it did
// not stop.
func (w *Worker) sleep(d time.Duration) bool {
	select {
	case <-time.After(d):
		return true
	case <-w.fetchCtx.Done():
		return false
	}
}

// run runs the tasks fetch hands it, each in the slot fetch took for it.
// When tasks are waiting, the slot is given back once the tool has
// returned, while its result is still being published (see handle); a
// tool has twice as many runners as the worker has slots, so that a
// runner is free to take a task pulled for a slot given back that way.
func (w *Worker) run(t *tool.Tool, rs *runners) {
	defer w.fetchers.Done()
	log := w.log.With(slog.String("tool", t.Name))
	for {
		select {
		case msg := <-rs.tasks:
			if w.fetchCtx.Err() != nil {
				// Stopping: hand the task back at once.
				_ = msg.Nak()
				w.slots.release()
				rs.done()
				continue
			}
			slot := slotHold{p: w.slots}
			w.handle(t, log, msg, &slot)
			slot.release()
			rs.done()
		case <-w.fetchCtx.Done():
			return
		}
	}
}

// slotHold is a slot held by a runner, given back once.
type slotHold struct {
	p        *slotPool
	released bool
}

// release gives the slot back unless it was already.
func (h *slotHold) release() {
	if !h.released {
		h.released = true
		h.p.release()
	}
}

// runners are a tool's runners, which fetch hands tasks over tasks.
type runners struct {
	tasks chan jetstream.Msg
	n     int           // how many
	busy  atomic.Int32  // tasks handed over and not finished
	idle  chan struct{} // told when a runner becomes free while more than half were busy
}

func newRunners(n int) *runners {
	return &runners{tasks: make(chan jetstream.Msg), n: n, idle: make(chan struct{}, 1)}
}

// done marks a task handed over as finished. Only with more than half of
// the runners busy (as many as the worker has slots) can the runners, not
// the slots, limit the fetcher: only then is it told.
func (rs *runners) done() {
	if int(rs.busy.Add(-1)) >= rs.n/2 {
		select {
		case rs.idle <- struct{}{}:
		default: // told already
		}
	}
}
