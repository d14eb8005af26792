package worker

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/trace"

	"github.com/offload-dev/offload/pkg/natsjs/internal/jsop"
	"github.com/offload-dev/offload/pkg/protocol"
	"github.com/offload-dev/offload/pkg/telemetry"
	"github.com/offload-dev/offload/pkg/tool"
)

// Backoff of result publish retries.
const (
	publishRetryMin = 100 * time.Millisecond //nolint:revive // time-naming: Min is the minimum, as Max beside it is the maximum
	publishRetryMax = 5 * time.Second
)

// respond publishes res as the held task's result, then acknowledges the
// delivery (with Term for a cancelled task, which is never retried). A
// result that cannot be published is kept and its publish retried, with
// backoff, while the task's heartbeat keeps the delivery alive: a finished
// tool is never run again for want of a publish (SPEC §5.3). Only when the
// worker's stop gives up is the task left to be redelivered.
func (w *Worker) respond(log *slog.Logger, fl *inflight, res protocol.Result, started time.Time, term bool) {
	task := fl.task
	res.TaskID = task.TaskID
	res.ToolCallID = task.ToolCallID
	res.Attempt = task.Attempt
	res.Worker = w.cfg.ID
	if !started.IsZero() {
		res.StartedAt = started.UTC()
	}
	res.FinishedAt = time.Now().UTC()
	if fl.span != nil && fl.span.IsRecording() {
		fl.span.SetAttributes(telemetry.OffloadStatus.String(string(res.Status)))
	}
	wait := publishRetryMin
	for attempt := 1; ; attempt++ {
		ctx, cancel := context.WithTimeout(w.hardCtx, jsop.Timeout)
		if fl.span != nil {
			ctx = trace.ContextWithSpan(ctx, fl.span) // the result carries the task span's trace context
		}
		err := w.publishResult(ctx, task.ConversationID, task.Tool, res)
		cancel()
		if err == nil {
			if f := w.afterResultStored.Load(); f != nil {
				(*f)()
			}
			break
		}
		if w.hardCtx.Err() != nil || w.cfg.Conn.IsClosed() {
			log.Error("result not published before the worker stopped; the task will be redelivered", slog.Any("error", err))
			return
		}
		log.Warn("result not published; retrying", slog.Int("attempt", attempt), slog.Duration("wait", wait), slog.Any("error", err))
		timer := time.NewTimer(wait)
		select {
		case <-timer.C:
		case <-w.hardCtx.Done():
			timer.Stop()
			log.Error("result not published before the worker stopped; the task will be redelivered", slog.Any("error", err))
			return
		}
		wait = min(2*wait, publishRetryMax)
	}
	if term {
		fl.settle(fl.msg.Term, log, "term")
	} else {
		fl.settle(fl.msg.Ack, log, "ack")
	}
}

// publishResult publishes res on <prefix>.result.<conv>.<task>.<tool> with
// Nats-Msg-Id res:<task>:<attempt>, so that results of redeliveries are
// dropped by the server within the dedup window while a later attempt's
// (a call dispatched again after an approval) is kept. A result too large for a message is
// replaced by a ResultTooLarge error, and one that cannot be encoded by an
// error saying so.
func (w *Worker) publishResult(ctx context.Context, conv, toolName string, res protocol.Result) error {
	buf := w.bufs.Get()
	data, err := protocol.AppendResult(*buf, &res)
	defer w.bufs.Put(buf, data) // published (copied) or failed by then
	// A result that cannot be encoded (the tool's metadata holds a value
	// JSON cannot carry) never will be: it is replaced by an error, as is
	// a result too large for a message.
	var replace *protocol.RemoteError
	if err != nil {
		replace = &protocol.RemoteError{Type: tool.ErrorType(err), Message: "the result cannot be encoded: " + err.Error()}
	} else if max := w.cfg.Conn.MaxPayload(); max > 0 && int64(len(data)) > max-1024 {
		replace = &protocol.RemoteError{Type: protocol.ErrorResultTooLarge,
			Message: fmt.Sprintf("the result is %d bytes; the server's max payload is %d", len(data), max)}
	}
	if replace != nil {
		small := protocol.ResultFromOutcome(nil, replace)
		small.TaskID, small.ToolCallID, small.Worker, small.Attempt = res.TaskID, res.ToolCallID, res.Worker, res.Attempt
		small.StartedAt, small.FinishedAt = res.StartedAt, res.FinishedAt
		if data, err = json.Marshal(small); err != nil {
			return fmt.Errorf("marshal result: %w", err)
		}
	}
	m := nats.NewMsg(w.subj.Result(conv, res.TaskID, toolName))
	m.Header.Set(jetstream.MsgIDHeader, protocol.ResultMsgID(res.TaskID, res.Attempt))
	telemetry.Inject(ctx, m.Header)
	m.Data = data
	if _, err := w.js.PublishMsg(ctx, m); err != nil {
		return fmt.Errorf("publish result: %w", err)
	}
	return nil
}
