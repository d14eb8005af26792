package natsjs

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/offload-dev/offload/pkg/tool"
)

// fetch pulls the tasks of one tool for as many slots as are free: a pull
// request is issued only once a slot is held, and asks for one task per
// slot then held, so no task waits in this process while another replica
// could run it (see [slotPool] for how slots rotate among the tools). One
// request covers every free slot instead of one request per task. Each
// task pulled is handed, with its slot, to an idle runner of the tool
// (see run); a runner is a long-lived goroutine that has grown its stack
// once, where a goroutine per task would grow a fresh one for every task
// (schema validation and JSON decoding go deep).
func (w *Worker) fetch(t *tool.Tool, c jetstream.Consumer, runners chan<- jetstream.Msg) {
	defer w.fetchers.Done()
	info := c.CachedInfo()
	p := newPuller(w.cfg.Conn, info.Stream, info.Name, w.cfg.Concurrency)
	defer p.close()
	handoff := func(msg jetstream.Msg) {
		select {
		case runners <- msg:
		case <-w.fetchCtx.Done():
			// Stopping: hand the task back at once.
			_ = msg.Nak()
			w.slots.release()
		}
	}
	for {
		if err := w.slots.acquire(w.fetchCtx, t.Name); err != nil {
			return
		}
		held := 1 + w.slots.tryAcquire(w.cfg.Concurrency-1)
		pctx, cancel := context.WithCancel(w.fetchCtx)
		pl := w.slots.startPull(cancel, t.Name)
		expires := shortPull
		if pl.long {
			expires = pullWait
		}
		n, err := p.pull(pctx, held, expires, handoff)
		w.slots.endPull(pl)
		cancel()
		for range held - n { // the slots no task came for
			w.slots.release()
		}
		if err != nil {
			if w.fetchCtx.Err() != nil {
				return
			}
			if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) || errors.Is(err, nats.ErrTimeout) {
				continue
			}
			w.log.Warn("pull failed", slog.String("tool", t.Name), slog.Any("error", err))
			select {
			case <-time.After(fetchRetryWait):
			case <-w.fetchCtx.Done():
				return
			}
		}
	}
}

// run runs the tasks fetch hands it, each in the slot fetch took for it.
// When tasks are waiting, the slot is given back once the tool has
// returned, while its result is still being published (see handle); a
// tool has twice as many runners as the worker has slots, so that a
// runner is free to take a task pulled for a slot given back that way.
func (w *Worker) run(t *tool.Tool, tasks <-chan jetstream.Msg) {
	defer w.fetchers.Done()
	log := w.log.With(slog.String("tool", t.Name))
	for {
		select {
		case msg := <-tasks:
			if w.fetchCtx.Err() != nil {
				// Stopping: hand the task back at once.
				_ = msg.Nak()
				w.slots.release()
				continue
			}
			slot := slotHold{p: w.slots}
			w.handle(t, log, msg, &slot)
			slot.release()
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
