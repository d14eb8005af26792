package worker

import (
	"log/slog"
	"sync/atomic"

	"github.com/nats-io/nats.go/jetstream"
)

// run runs the tasks fetch hands it, each in the slot fetch took for it.
// When tasks are waiting, the slot is given back once the tool has
// returned, while its result is still being published (see handle); a
// tool has twice as many runners as the worker has slots, so that a
// runner is free to take a task pulled for a slot given back that way.
func (w *Worker) run(p *toolPart, rs *runnerPool) {
	log := w.log.With(slog.String("tool", p.name))
	for {
		select {
		case msg := <-rs.tasks:
			if p.ctx.Err() != nil {
				// Stopping: hand the task back at once.
				_ = msg.Nak()
				w.slots.release()
				rs.done()
				continue
			}
			// The tool as served now (Serve may have replaced it).
			w.handle(p.tool.Load(), log, msg) // gives the task's slot back
			rs.done()
		case <-p.ctx.Done():
			return
		}
	}
}

// heldSlot is a slot held by a runner, given back once.
type heldSlot struct {
	p        *slotPool
	released bool
}

// release gives the slot back unless it was already.
func (h *heldSlot) release() {
	if !h.released {
		h.released = true
		h.p.release()
	}
}

// runnerPool is a tool's runners, which its fetcher hands tasks over
// tasks.
type runnerPool struct {
	tasks chan jetstream.Msg
	n     int           // how many
	busy  atomic.Int32  // tasks handed over and not finished
	idle  chan struct{} // told when a runner becomes free while more than half were busy
}

func newRunnerPool(n int) *runnerPool {
	return &runnerPool{tasks: make(chan jetstream.Msg), n: n, idle: make(chan struct{}, 1)}
}

// done marks a task handed over as finished. Only with more than half of
// the runners busy (as many as the worker has slots) can the runners, not
// the slots, limit the fetcher: only then is it told.
func (rs *runnerPool) done() {
	if int(rs.busy.Add(-1)) >= rs.n/2 {
		select {
		case rs.idle <- struct{}{}:
		default: // told already
		}
	}
}
