package worker

import (
	"context"
	"strconv"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/offload-dev/offload/pkg/natsjs"
	"github.com/offload-dev/offload/pkg/natsjs/internal/jsop"
)

// deadLetter keeps the task d holds as a dead letter (SPEC §19): stored as
// delivered, with its headers, on <prefix>.dead.<conv>.<task>.<tool>, with
// why and after how many deliveries, once per attempt (its Nats-Msg-Id),
// for an operator to replay or discard. An error leaves the task to be
// handed back: no call is dropped without its letter.
func (w *Worker) deadLetter(d *delivery, reason string) error {
	m := nats.NewMsg(w.subj.Dead(d.task.ConversationID, d.task.TaskID, d.tool.Name))
	m.Header = keptHeaders(d.msg.Headers())
	m.Header.Set(jetstream.MsgIDHeader, "dead:"+d.task.TaskID+":"+strconv.Itoa(d.task.Attempt))
	m.Header.Set(natsjs.DeadReasonHeader, reason)
	m.Header.Set(natsjs.DeadWorkerHeader, w.cfg.ID)
	if d.md != nil {
		m.Header.Set(natsjs.DeadDeliveriesHeader, strconv.FormatUint(d.md.NumDelivered, 10))
	}
	m.Data = d.msg.Data()
	ctx, cancel := context.WithTimeout(w.hardCtx, jsop.Timeout)
	defer cancel()
	_, err := w.js.PublishMsg(ctx, m)
	return err
}
