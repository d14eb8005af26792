package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/offload-dev/offload/pkg/natsjs"
	"github.com/offload-dev/offload/pkg/natsjs/internal/jsop"
	"github.com/offload-dev/offload/pkg/protocol"
)

// A task that exhausts its deliveries stays in the work-queue stream, and
// the server tells only once, with an advisory on
// $JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.<tasks stream>.task_<tool>.
// So the worker finds such tasks two ways (SPEC §5.3):
//
//   - the advisory, captured by the exhausted stream (<PREFIX>_EXHAUSTED,
//     work queue) whether or not a replica is connected, and pulled from
//     the tool's durable consumer exhausted_<tool>, shared by the replicas:
//     an advisory is acknowledged once its task is answered (or found
//     answered), and handed back with a growing delay while the result
//     cannot be published, so none is lost to a dead replica, a disconnect
//     or a busy pool;
//   - a sweep, at start, after every reconnect and every sweepEvery, of
//     each tool whose consumer holds no delivery at that moment
//     (num_ack_pending 0): every task delivered so far (stream sequence at
//     most the consumer's delivered sequence) was then either acknowledged,
//     and so deleted, or given up on; and a task given up on is never
//     delivered again. So a task still stored on the tool's subject at or
//     below that sequence can only be an exhausted one. (The sweep is the
//     fallback for an advisory the stream did not capture: one sent before
//     the stream existed, or while it could not store it.)
//
// Both answer with a DeliveriesExhausted result and delete the task. Both
// may find the same task, or a task acknowledged a moment ago: the result's
// Nats-Msg-Id (res:<task>:<attempt>) makes the stream drop the second result.

// maxDeliverAdvisory is the part of io.nats.jetstream.advisory.v1.max_deliver
// the worker reads.
type maxDeliverAdvisory struct {
	Stream     string `json:"stream"`
	Consumer   string `json:"consumer"`
	StreamSeq  uint64 `json:"stream_seq"`
	Deliveries uint64 `json:"deliveries"`
}

// advDrainWait bounds the wait for an advisory already pulled when the
// worker stops (it is handed back at once rather than after its ack wait).
const advDrainWait = 500 * time.Millisecond

// startAdvisories starts, for each tool, the loop that pulls its
// max-deliveries advisories from its consumer on the exhausted stream.
func (w *Worker) startAdvisories(consumers map[string]jetstream.Consumer) error {
	ctx, cancel := context.WithCancel(context.Background())
	w.mu.Lock()
	w.advCancel = cancel
	w.mu.Unlock()
	for name, c := range consumers {
		it, err := advisoryIterator(c)
		if err != nil {
			return fmt.Errorf("natsjs: worker: pull from consumer %s on %s: %w", natsjs.ExhaustedConsumerName(name), w.names.Exhausted, err)
		}
		w.advisoryLoops.Add(1)
		go w.pullAdvisories(ctx, name, it)
	}
	return nil
}

// advisoryIterator pulls c's advisories one at a time: no advisory waits
// in this process while another replica could answer it.
func advisoryIterator(c jetstream.Consumer) (jetstream.MessagesContext, error) {
	return c.Messages(jetstream.PullMaxMessages(1))
}

// stopAdvisories stops the advisory loops and waits for them: an advisory
// being answered is handed back, so that another replica answers it.
func (w *Worker) stopAdvisories() {
	w.mu.Lock()
	cancel := w.advCancel
	w.mu.Unlock()
	if cancel != nil {
		cancel()
	}
	w.advisoryLoops.Wait()
}

// pullAdvisories answers the advisories of toolName's consumer, starting
// with the iterator it, until ctx ends. When the iterator ends (its
// consumer was deleted, say), the consumer is ensured again and a new
// iterator started.
func (w *Worker) pullAdvisories(ctx context.Context, toolName string, it jetstream.MessagesContext) {
	defer w.advisoryLoops.Done()
	log := w.log.With(slog.String("tool", toolName), slog.String("consumer", natsjs.ExhaustedConsumerName(toolName)))
	for {
		err := w.answerAdvisories(ctx, log, toolName, it)
		if ctx.Err() != nil {
			return
		}
		if w.cfg.Conn.IsClosed() {
			log.Error("max-deliveries advisories no longer pulled: the connection is closed")
			return
		}
		log.Warn("max-deliveries advisories interrupted; binding the consumer again", slog.Any("error", err))
		for it = nil; it == nil; {
			if !pause(ctx, fetchRetryWait) {
				return
			}
			rctx, cancel := context.WithTimeout(ctx, jsop.Timeout)
			c, err := natsjs.EnsureExhaustedConsumer(rctx, w.js, toolName, w.provisionOptions())
			cancel()
			if err == nil {
				it, err = advisoryIterator(c)
			}
			if err != nil {
				log.Warn("consumer of max-deliveries advisories not bound; retrying", slog.Any("error", err))
				continue
			}
			log.Info("consumer of max-deliveries advisories bound again")
		}
	}
}

// answerAdvisories answers the advisories of it until ctx ends (it then
// hands back those already pulled and returns nil) or it ends (it returns
// why).
func (w *Worker) answerAdvisories(ctx context.Context, log *slog.Logger, toolName string, it jetstream.MessagesContext) error {
	defer func() {
		it.Drain()
		for {
			m, err := it.Next(jetstream.NextMaxWait(advDrainWait))
			if err != nil {
				return
			}
			_ = m.Nak()
		}
	}()
	for {
		m, err := it.Next(jetstream.NextContext(ctx))
		switch {
		case ctx.Err() != nil:
			if m != nil {
				_ = m.Nak()
			}
			return nil
		case errors.Is(err, jetstream.ErrMsgIteratorClosed):
			return err
		case err != nil:
			// A missed heartbeat or a status the iterator recovers from
			// (it issues new pull requests itself).
			log.Debug("pulling max-deliveries advisories", slog.Any("error", err))
			if !pause(ctx, fetchRetryWait) {
				return nil
			}
			continue
		}
		w.onMaxDeliveries(ctx, log, toolName, m)
	}
}

// pause waits d, or until ctx ends (it then returns false).
func pause(ctx context.Context, d time.Duration) bool {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// onMaxDeliveries answers the task named by a max-deliveries advisory and
// acknowledges it; it hands the advisory back, with a delay growing with
// its deliveries, while the answer fails, and at once when the worker
// stops.
func (w *Worker) onMaxDeliveries(ctx context.Context, log *slog.Logger, toolName string, m jetstream.Msg) {
	var adv maxDeliverAdvisory
	if err := json.Unmarshal(m.Data(), &adv); err != nil || adv.StreamSeq == 0 ||
		adv.Stream != w.names.Tasks || adv.Consumer != natsjs.TaskConsumerName(toolName) {
		log.Warn("unreadable max-deliveries advisory; dropped", slog.String("subject", m.Subject()))
		_ = m.Term()
		return
	}
	log = log.With(slog.Uint64("stream_seq", adv.StreamSeq))
	actx, cancel := context.WithTimeout(ctx, jsop.Timeout)
	defer cancel()
	raw, err := w.tasksStream.GetMsg(actx, adv.StreamSeq)
	switch {
	case errors.Is(err, jetstream.ErrMsgNotFound):
		_ = m.Ack() // answered (or acknowledged) already
		return
	case err != nil:
		log.Warn("task of a max-deliveries advisory not loaded; retrying", slog.Any("error", err))
	case raw.Subject != w.subj.Task(toolName):
		log.Warn("max-deliveries advisory names a task of another tool; dropped", slog.String("subject", raw.Subject))
		_ = m.Term()
		return
	default:
		err = w.answerExhausted(actx, log, raw, fmt.Sprintf("delivered %d times without a result", adv.Deliveries))
		if err == nil {
			if err := m.Ack(); err != nil {
				log.Warn("max-deliveries advisory not acknowledged; a replica answers it again", slog.Any("error", err))
			}
			return
		}
		log.Warn("DeliveriesExhausted result not published; retrying", slog.Any("error", err))
	}
	if ctx.Err() != nil {
		_ = m.Nak() // stopping: another replica answers it at once
		return
	}
	delay := publishRetryMin
	if md, err := m.Metadata(); err == nil {
		for n := uint64(1); n < md.NumDelivered && delay < publishRetryMax; n++ {
			delay *= 2
		}
	}
	_ = m.NakWithDelay(min(delay, publishRetryMax))
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
		if err := w.publishResult(ctx, task.ConversationID, task.Tool, res); err != nil {
			return err
		}
		w.count(task.Tool, protocol.StatusError)
	}
	if err := w.tasksStream.DeleteMsg(ctx, raw.Sequence); err != nil && !errors.Is(err, jetstream.ErrMsgNotFound) {
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
	ctx, cancel := context.WithTimeout(ctx, jsop.Timeout)
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
		raw, err := w.tasksStream.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(subject))
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
	defer w.periodic.Done()
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
