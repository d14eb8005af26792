package remote

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/offload-dev/offload/pkg/natsjs"
	"github.com/offload-dev/offload/pkg/natsjs/internal/jsop"
	"github.com/offload-dev/offload/pkg/natsjs/internal/taskmem"
	"github.com/offload-dev/offload/pkg/protocol"
)

// Handle is a task dispatched with [Dispatcher.Dispatch]: it reports the
// task's result when it arrives and can cancel or detach it. Its methods
// are safe for concurrent use.
type Handle struct {
	d       *Dispatcher
	task    protocol.Task
	started time.Time
	span    trace.SpanContext // the dispatch span's (not valid for an attached task)

	// timer fails the call once its deadline and grace have passed
	// (nil for a task without a deadline); set by Dispatcher.register.
	timer *time.Timer

	done chan struct{}
	once sync.Once
	res  protocol.Result
	err  error
}

func newHandle(d *Dispatcher, task protocol.Task, sc trace.SpanContext) *Handle {
	return &Handle{d: d, task: task, started: time.Now(), span: sc, done: make(chan struct{})}
}

// logCtx is the context of the call's log lines: with the dispatch span's
// context, so that a log handler that reads it (telemetry.LogHandler) adds
// its trace_id and span_id.
func (h *Handle) logCtx() context.Context {
	if !h.span.IsValid() {
		return context.Background()
	}
	return trace.ContextWithSpanContext(context.Background(), h.span)
}

// finish records the outcome once; it reports whether this call did.
func (h *Handle) finish(res protocol.Result, err error) bool {
	did := false
	h.once.Do(func() {
		if h.timer != nil {
			h.timer.Stop()
		}
		h.res, h.err, did = res, err, true
		close(h.done)
	})
	return did
}

// Task returns the task as it was published (with its deadline and
// creation time filled in).
func (h *Handle) Task() protocol.Task { return h.task }

// Done is closed once the result is known, the task was cancelled or
// detached, or the dispatcher can no longer report it.
func (h *Handle) Done() <-chan struct{} { return h.done }

// Result returns the task's result once Done is closed: the worker's
// result, a cancelled result after [Handle.Cancel], or an error
// ([natsjs.ErrStopped], [natsjs.ErrDetached], [natsjs.ErrServerLost]). Before Done is closed it
// returns [natsjs.ErrPending].
func (h *Handle) Result() (protocol.Result, error) {
	select {
	case <-h.done:
		return h.res, h.err
	default:
		return protocol.Result{}, natsjs.ErrPending
	}
}

// Wait waits for the result. When ctx ends first, the task is cancelled
// over the wire and ctx's error is returned, unless the result won the
// race.
func (h *Handle) Wait(ctx context.Context) (protocol.Result, error) {
	select {
	case <-h.done:
		return h.res, h.err
	case <-ctx.Done():
	}
	select {
	case <-h.done:
		return h.res, h.err
	default:
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), jsop.Timeout)
	defer cancel()
	if err := h.Cancel(cctx, "the caller gave up: "+ctx.Err().Error()); err != nil {
		h.d.log.WarnContext(h.logCtx(), "cancel not published", slog.String("task_id", h.task.TaskID), slog.Any("error", err))
	}
	return protocol.Result{}, ctx.Err()
}

// Cancel cancels the task over the wire with reason (see
// [Dispatcher.Cancel]); Done is closed at once with a cancelled result
// unless the result had arrived first.
func (h *Handle) Cancel(ctx context.Context, reason string) error {
	return h.d.Cancel(ctx, h.task.ConversationID, h.task.TaskID, h.task.Tool, reason)
}

// CancelAndWait cancels the task over the wire with reason and, unlike Cancel,
// keeps the handle waiting until the worker confirms that the tool stopped
// (its cancelled result, or its result if it finished first), at most
// wait; after that Done is closed with a cancelled result anyway (no worker
// may be there to answer).
func (h *Handle) CancelAndWait(ctx context.Context, reason string, wait time.Duration) error {
	select {
	case <-h.done:
		return nil
	default:
	}
	if err := h.d.publishCancel(ctx, h.task.ConversationID, h.task.TaskID, h.task.Tool, reason); err != nil {
		_ = h.Cancel(ctx, reason) // not confirmable: give up at once
		return err
	}
	t := time.AfterFunc(wait, func() {
		cctx, cancel := context.WithTimeout(context.Background(), jsop.Timeout)
		defer cancel()
		_ = h.Cancel(cctx, reason+" (not confirmed by a worker in "+wait.String()+")")
	})
	go func() {
		<-h.done
		t.Stop()
	}()
	return nil
}

// Detach stops waiting for the task without cancelling it: the worker runs
// it on and stores its result, which a later process (a resume) reads from
// the results stream. Done is closed with [natsjs.ErrDetached] unless the result
// had arrived first; a result arriving later is left alone, neither
// delivered nor refused.
func (h *Handle) Detach() {
	d := h.d
	d.mu.Lock()
	_, pending := d.pending[h.task.TaskID]
	if pending {
		delete(d.pending, h.task.TaskID)
		d.rememberLocked(h.task.TaskID, h.task.ConversationID, taskmem.Detached)
	}
	d.mu.Unlock()
	if pending {
		d.setPending(h.task.Mode, -1)
		h.finish(protocol.Result{}, natsjs.ErrDetached)
	}
}
