package natsjs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/offload-dev/offload/pkg/protocol"
)

// A task that exhausts its deliveries stays in the work-queue stream, and
// the server tells only once, with a core-NATS advisory that nobody may be
// listening to. So the worker finds such tasks two ways (SPEC §5.3):
//
//   - the advisory, in one queue group per tool shared by the replicas, for
//     a prompt answer (retried until the result is published, or the
//     worker stops);
//   - a sweep, at start, after every reconnect and every sweepEvery, of
//     each tool whose consumer holds no delivery at that moment
//     (num_ack_pending 0): every task delivered so far (stream sequence at
//     most the consumer's delivered sequence) was then either acknowledged,
//     and so deleted, or given up on; and a task given up on is never
//     delivered again. So a task still stored on the tool's subject at or
//     below that sequence can only be an exhausted one. (The sweep is the
//     fallback for an advisory sent while no replica listened, or whose
//     handler gave up when its worker stopped; a consumer that always
//     holds deliveries is never swept.)
//
// Both answer with a DeliveriesExhausted result and delete the task. Both
// may find the same task, or a task acknowledged a moment ago: the result's
// Nats-Msg-Id (res:<task>) makes the stream drop the second result.

// maxDeliverAdvisory is the part of io.nats.jetstream.advisory.v1.max_deliver
// the worker reads.
type maxDeliverAdvisory struct {
	Stream     string `json:"stream"`
	Consumer   string `json:"consumer"`
	StreamSeq  uint64 `json:"stream_seq"`
	Deliveries uint64 `json:"deliveries"`
}

// subscribeAdvisories joins, for each tool, the queue group of its
// max-deliveries advisories.
func (w *Worker) subscribeAdvisories() error {
	for name := range w.tools {
		subject := "$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES." + w.names.Tasks + "." + TaskConsumerName(name)
		sub, err := w.cfg.Conn.QueueSubscribe(subject, "offload_dlq_"+w.cfg.Prefix+"_"+name, w.onMaxDeliveries)
		if err != nil {
			return fmt.Errorf("natsjs: worker: subscribe to %s: %w", subject, err)
		}
		w.mu.Lock()
		w.advSubs = append(w.advSubs, sub)
		w.mu.Unlock()
	}
	return nil
}

// unsubscribeAdvisories leaves the advisory queue groups, so that the
// advisories of the tasks this worker hands back reach the other replicas,
// and waits for the callbacks in progress.
func (w *Worker) unsubscribeAdvisories() {
	w.mu.Lock()
	first := !w.closing
	w.closing = true
	subs := w.advSubs
	w.advSubs = nil
	w.mu.Unlock()
	if first {
		close(w.advStop) // callbacks retrying give up
	}
	for _, s := range subs {
		_ = s.Unsubscribe()
	}
	w.callbacks.Wait()
}

// onMaxDeliveries answers the task named by a max-deliveries advisory.
func (w *Worker) onMaxDeliveries(m *nats.Msg) {
	w.mu.Lock()
	if w.closing {
		w.mu.Unlock()
		return
	}
	w.callbacks.Add(1)
	w.mu.Unlock()
	defer w.callbacks.Done()

	var adv maxDeliverAdvisory
	if err := json.Unmarshal(m.Data, &adv); err != nil || adv.StreamSeq == 0 {
		w.log.Warn("unreadable max-deliveries advisory", slog.String("subject", m.Subject))
		return
	}
	log := w.log.With(slog.Uint64("stream_seq", adv.StreamSeq), slog.String("consumer", adv.Consumer))
	// Retried until answered: the sweep finds the task only once the
	// consumer holds no delivery, which a busy pool may never do.
	for wait := publishRetryMin; ; wait = min(2*wait, publishRetryMax) {
		ctx, cancel := context.WithTimeout(context.Background(), publishTimeout)
		raw, err := w.tasksStrm.GetMsg(ctx, adv.StreamSeq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			cancel()
			return // handled already
		}
		if err != nil {
			log.Warn("task of a max-deliveries advisory not loaded; retrying", slog.Duration("wait", wait), slog.Any("error", err))
		} else if err = w.answerExhausted(ctx, log, raw, fmt.Sprintf("delivered %d times without a result", adv.Deliveries)); err != nil {
			log.Warn("DeliveriesExhausted result not published; retrying", slog.Duration("wait", wait), slog.Any("error", err))
		}
		cancel()
		if err == nil {
			return
		}
		timer := time.NewTimer(wait)
		select {
		case <-timer.C:
		case <-w.advStop:
			timer.Stop()
			log.Error("task of a max-deliveries advisory not answered before the worker stopped; the sweep will find it")
			return
		}
	}
}

// answerExhausted publishes a DeliveriesExhausted result for the stored
// task raw and deletes it from the work queue. It fails only when the
// result could not be published (the task is left in place).
func (w *Worker) answerExhausted(ctx context.Context, log *slog.Logger, raw *jetstream.RawStreamMsg, detail string) error {
	task, err := protocol.DecodeTask(raw.Data, nil)
	if err != nil {
		log.Error("exhausted task does not decode; deleted", slog.Any("error", err))
	} else {
		log = log.With(slog.String("task_id", task.TaskID), slog.String("tool", task.Tool))
		log.Warn("task exhausted its deliveries", slog.String("detail", detail))
		res := protocol.ResultFromOutcome(nil, &protocol.RemoteError{
			Type:    protocol.ErrorDeliveriesExhausted,
			Message: detail,
		})
		res.TaskID, res.ToolCallID, res.Worker, res.FinishedAt, res.Attempt = task.TaskID, task.ToolCallID, w.cfg.ID, time.Now().UTC(), task.Attempt
		if err := w.publishResult(ctx, task.ConversationID, res); err != nil {
			return err
		}
		w.count(task.Tool, protocol.StatusError)
	}
	if err := w.tasksStrm.DeleteMsg(ctx, raw.Sequence); err != nil && !errors.Is(err, jetstream.ErrMsgNotFound) {
		log.Warn("exhausted task not deleted", slog.Any("error", err))
	}
	return nil
}

// sweepExhausted answers every task of the worker's tools that the server
// gave up on, for each tool whose consumer holds no delivery.
func (w *Worker) sweepExhausted(ctx context.Context) {
	for name, c := range w.consumers {
		if err := w.sweepTool(ctx, name, c); err != nil {
			w.log.Warn("sweep of exhausted tasks failed", slog.String("tool", name), slog.Any("error", err))
		}
	}
}

func (w *Worker) sweepTool(ctx context.Context, name string, c jetstream.Consumer) error {
	ctx, cancel := context.WithTimeout(ctx, publishTimeout)
	defer cancel()
	info, err := c.Info(ctx)
	if err != nil {
		return err
	}
	if info.NumAckPending > 0 {
		return nil // cannot tell held tasks from exhausted ones; later
	}
	floor := info.Delivered.Stream
	subject := w.subj.Task(name)
	for seq := uint64(1); seq <= floor; {
		raw, err := w.tasksStrm.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(subject))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		if raw.Sequence > floor {
			return nil
		}
		log := w.log.With(slog.Uint64("stream_seq", raw.Sequence), slog.String("consumer", info.Name))
		if err := w.answerExhausted(ctx, log, raw, fmt.Sprintf("delivered %d times without a result", info.Config.MaxDeliver)); err != nil {
			log.Error("DeliveriesExhausted result not published; the sweep will try again", slog.Any("error", err))
		}
		seq = raw.Sequence + 1
	}
	return nil
}

// sweepLoop sweeps every sweepEvery until the worker stops.
func (w *Worker) sweepLoop() {
	defer w.bg.Done()
	tick := time.NewTicker(sweepEvery)
	defer tick.Stop()
	for {
		select {
		case <-tick.C:
			w.sweepExhausted(context.Background())
		case <-w.bgStop:
			return
		}
	}
}
