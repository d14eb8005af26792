package remote

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/offload-dev/offload/pkg/natsjs/internal/jsop"
	"github.com/offload-dev/offload/pkg/natsjs/internal/taskmem"
	"github.com/offload-dev/offload/pkg/protocol"
)

// expire fails the call of h, whose task's deadline and grace have passed
// without a result (the worker died after taking it, or its result was
// refused), unless the stream holds its result, which then answers it:
// the handle reports a DeadlineExceeded error result, the task
// is remembered as cancelled, so that a late result is refused, and a
// cancel is published so that a worker still running it stops.
func (d *Dispatcher) expire(h *Handle) {
	task := h.task
	d.mu.Lock()
	if !d.life.Running() || d.pending[task.TaskID] != h {
		d.mu.Unlock()
		return // answered, cancelled or stopped meanwhile
	}
	d.expiring.Add(1)
	d.mu.Unlock()
	defer d.expiring.Done()
	// A result the stream holds answers the call, however its consumer
	// missed it (dispatcher_recover.go).
	if d.lookUp(d.ctx, h) {
		return
	}
	d.mu.Lock()
	if !d.life.Running() || d.pending[task.TaskID] != h {
		d.mu.Unlock()
		return
	}
	delete(d.pending, task.TaskID)
	d.mem.Finish(time.Now(), task.TaskID, task.ConversationID, taskmem.Cancelled, true)
	d.mu.Unlock()

	d.setPending(task.Mode, -1)
	d.observe(task, string(protocol.StatusError), h.started)
	msg := fmt.Sprintf("no result by the task's deadline %s and a grace of %s: the task is cancelled",
		task.Deadline.Format(time.RFC3339), d.cfg.DeadlineGrace)
	d.log.WarnContext(h.logCtx(), "call failed: "+msg, slog.String("task_id", task.TaskID), slog.String("tool", task.Tool),
		slog.String("conversation_id", task.ConversationID))
	h.finish(protocol.Result{
		TaskID: task.TaskID, ToolCallID: task.ToolCallID, Attempt: task.Attempt,
		Status: protocol.StatusError, ErrorType: protocol.ErrorDeadlineExceeded, Message: msg,
	}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), jsop.Timeout)
	defer cancel()
	if err := d.publishCancel(ctx, task.ConversationID, task.TaskID, task.Tool, "deadline exceeded"); err != nil {
		d.log.WarnContext(h.logCtx(), "cancel not published", slog.String("task_id", task.TaskID), slog.Any("error", err))
	}
}
