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

// fetch pulls the tasks of one tool, one per free slot: a pull request is
// issued only once a slot is held, so no task waits in this process while
// another replica could run it (see [slotPool] for how slots rotate among
// the tools). The task runs on this goroutine: a long-lived goroutine has
// grown its stack once, where a goroutine per task would grow a fresh one
// for every task (schema validation and JSON decoding go deep). When tasks
// are waiting, the slot is given back once the tool has returned, while its
// result is still being published (see handle); a tool has twice as many
// fetchers as the worker has slots, so that a fetcher is free to take a
// slot given back that way.
func (w *Worker) fetch(t *tool.Tool, c jetstream.Consumer) {
	defer w.fetchers.Done()
	info := c.CachedInfo()
	p := newPuller(w.cfg.Conn, info.Stream, info.Name)
	defer p.close()
	for {
		if err := w.slots.acquire(w.fetchCtx, t.Name); err != nil {
			return
		}
		pctx, cancel := context.WithCancel(w.fetchCtx)
		pl := w.slots.startPull(cancel, t.Name)
		expires := shortPull
		if pl.long {
			expires = pullWait
		}
		msg, err := p.next(pctx, expires)
		w.slots.endPull(pl)
		cancel()
		if err != nil {
			w.slots.release()
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
			continue
		}
		if w.fetchCtx.Err() != nil {
			// Stopping: hand the task back at once.
			_ = msg.Nak()
			w.slots.release()
			return
		}
		slot := slotHold{p: w.slots}
		w.handle(t, msg, &slot)
		slot.release()
	}
}

// slotHold is a slot held by a fetcher, given back once.
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
