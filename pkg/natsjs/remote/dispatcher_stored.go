package remote

import (
	"context"
	"errors"
	"log/slog"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/offload-dev/offload/pkg/natsjs"
	"github.com/offload-dev/offload/pkg/natsjs/internal/jsop"
	"github.com/offload-dev/offload/pkg/protocol"
)

// storedResult answers the call of task, whose publish the server
// deduplicated (the same task and attempt was published before, by a
// process that died after dispatching it, SPEC §13), from the result its
// worker stored, if there is one: it may have been stored before this
// dispatcher's consumer began, which would never deliver it. Without one,
// the call waits for the worker's result as any other.
func (d *Dispatcher) storedResult(ctx context.Context, h *Handle, task protocol.Task) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), jsop.Timeout)
	defer cancel()
	subject := d.subj.Result(task.ConversationID, task.TaskID, task.Tool)
	s, err := d.js.Stream(ctx, natsjs.NamesFor(d.cfg.Prefix).Results)
	var msg *jetstream.RawStreamMsg
	if err == nil {
		msg, err = s.GetLastMsgForSubject(ctx, subject)
	}
	switch {
	case errors.Is(err, jetstream.ErrMsgNotFound):
		return
	case err != nil:
		d.log.WarnContext(h.logCtx(), "the stored result of a task dispatched again not looked up; waiting for its worker",
			slog.String("task_id", task.TaskID), slog.Any("error", err))
		return
	}
	d.route(msg.Subject, msg.Data, source{seq: msg.Sequence})
}
