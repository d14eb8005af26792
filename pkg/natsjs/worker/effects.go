package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/offload-dev/offload/pkg/natsjs"
	"github.com/offload-dev/offload/pkg/natsjs/internal/direct"
	"github.com/offload-dev/offload/pkg/natsjs/internal/jsop"
	"github.com/offload-dev/offload/pkg/protocol"
	"github.com/offload-dev/offload/pkg/tool"
)

// effectHold is the ledger entry of the attempt a delivery holds: the
// worker completes it (finished) once the attempt's result is stored.
type effectHold struct {
	key     string
	rev     uint64 // the entry's revision, for the compare-and-set of finished
	started natsjs.EffectStarted
}

// verdict is what the ledger says about a delivery.
type verdict int

const (
	verdictRun      verdict = iota // started is ours: run the tool
	verdictAnswered                // the attempt's result is stored: acknowledge without running
	verdictUnknown                 // started by a worker that stopped, no result: a person decides
	verdictBusy                    // this worker runs the attempt on another delivery
	verdictResume                  // started by a worker that stopped, which recorded how to resume: resume it
)

// beginEffect consults and writes the ledger before the attempt's tool
// runs (SPEC §13). It first creates the attempt's entry, started by this
// worker, with compare-and-set: that succeeds for every first run. An
// entry already there means a delivery of this attempt ran before:
//
//   - finished, or its result stored (the worker died between the two):
//     the attempt is answered; the delivery is acknowledged without running
//     (the agent reads the stored result);
//   - started by this worker, which still runs it on another delivery: busy;
//   - else the worker that started it is gone: the server redelivers an
//     attempt only when its holder stopped acknowledging it for an ack wait
//     (no in-progress acks: killed, cut off, hung) or handed it back
//     without withdrawing the entry (a stop that gave up on a tool ignoring
//     its cancellation). The tool is not run again (unknown).
//
// A tool declared idempotent keeps no entry and may run again
// (idempotentEffect).
//
// An error (the ledger or the results stream unavailable) leaves the
// delivery to be handed back: the tool never runs without its entry.
func (w *Worker) beginEffect(t *tool.Tool, fl *inflight, md *jetstream.MsgMetadata) (verdict, natsjs.Effect, error) {
	if w.cfg.NoEffectLedger {
		return verdictRun, natsjs.Effect{Started: natsjs.EffectStarted{Worker: w.cfg.ID}}, nil
	}
	ctx, cancel := context.WithTimeout(w.hardCtx, jsop.Timeout)
	defer cancel()
	if t.Idempotent {
		return w.idempotentEffect(ctx, fl, md)
	}
	task := fl.task
	key := natsjs.EffectKey(t.Name, task.TaskID, task.Attempt)
	mine := natsjs.EffectStarted{Worker: w.cfg.ID, At: time.Now().UTC()}
	data, err := json.Marshal(natsjs.Effect{Started: mine})
	if err != nil {
		return 0, natsjs.Effect{}, fmt.Errorf("encode effect entry: %w", err)
	}
	rev, err := w.effects.Create(ctx, key, data)
	if err == nil {
		fl.effect = &effectHold{key: key, rev: rev, started: mine}
		return verdictRun, natsjs.Effect{Started: mine}, nil
	}
	if !errors.Is(err, jetstream.ErrKeyExists) {
		return 0, natsjs.Effect{}, fmt.Errorf("create effect entry %s: %w", key, err)
	}
	value, rev, err := w.effects.Get(ctx, key)
	if err != nil {
		return 0, natsjs.Effect{}, fmt.Errorf("read effect entry %s: %w", key, err)
	}
	e, err := natsjs.ParseEffect(key, value)
	if err != nil {
		// Written by no worker of this version: what ran is unknown.
		e = natsjs.Effect{Started: natsjs.EffectStarted{Worker: "unknown"}}
	}
	if e.Finished != nil {
		return verdictAnswered, e, nil
	}
	seq, status, stored, err := w.storedResult(ctx, task)
	if err != nil {
		return 0, e, err
	}
	if stored {
		fl.effect = &effectHold{key: key, rev: rev, started: e.Started}
		w.finishEffect(w.log, fl, status, seq)
		return verdictAnswered, e, nil
	}
	if e.Started.Worker == w.cfg.ID && w.cancels.runsAttempt(fl) {
		return verdictBusy, e, nil
	}
	if len(e.Resume) > 0 {
		return w.takeOver(ctx, fl, key, rev, e, mine)
	}
	fl.effect = &effectHold{key: key, rev: rev, started: e.Started}
	return verdictUnknown, e, nil
}

// takeOver makes this worker the holder of an attempt whose worker
// stopped after recording how to resume it (Effect.Resume): the entry is
// rewritten, started by this worker with the same state, by
// compare-and-set on the revision read, so that of two deliveries only one
// resumes it (the other finds it started by a live worker: busy on this
// one, unknown elsewhere until that worker too is gone).
func (w *Worker) takeOver(ctx context.Context, fl *inflight, key string, rev uint64, e natsjs.Effect, mine natsjs.EffectStarted) (verdict, natsjs.Effect, error) {
	taken := natsjs.Effect{Started: mine, Resume: e.Resume}
	data, err := json.Marshal(taken)
	if err != nil {
		return 0, e, fmt.Errorf("encode effect entry: %w", err)
	}
	newRev, err := w.effects.Update(ctx, key, data, rev)
	if err != nil {
		return 0, e, fmt.Errorf("take effect entry %s over: %w", key, err)
	}
	fl.effect = &effectHold{key: key, rev: newRev, started: mine}
	return verdictResume, e, nil
}

// checkpoint is the RunContext.Checkpoint of the attempt fl holds the
// entry of: it rewrites the entry with the tool's state, by compare-and-set
// on the revision held (nil when no entry is held: an idempotent tool, or
// no ledger).
func (w *Worker) checkpoint(fl *inflight) func(context.Context, json.RawMessage) error {
	h := fl.effect
	if h == nil {
		return nil
	}
	var mu sync.Mutex
	return func(ctx context.Context, state json.RawMessage) error {
		if !json.Valid(state) {
			return fmt.Errorf("natsjs: checkpoint of %s: not JSON", h.key)
		}
		mu.Lock()
		defer mu.Unlock()
		data, err := json.Marshal(natsjs.Effect{Started: h.started, Resume: state})
		if err != nil {
			return fmt.Errorf("encode effect entry: %w", err)
		}
		ctx, cancel := context.WithTimeout(ctx, jsop.Timeout)
		defer cancel()
		rev, err := w.effects.Update(ctx, h.key, data, h.rev)
		if err != nil {
			return fmt.Errorf("checkpoint effect entry %s: %w", h.key, err)
		}
		h.rev = rev
		return nil
	}
}

// idempotentEffect is beginEffect for a tool declared idempotent: running
// its attempt again with the same key has the effect of running it once,
// so the ledger has nothing to guard and the worker writes no entry
// (neither started nor finished). The first delivery runs the tool; a
// redelivery (or one without metadata) is still answered from the
// attempt's stored result if there is one, and else runs again with the
// same key. The holder of a redelivered attempt may still be running it
// (cut off, hung): two runs of an idempotent tool at once are allowed.
func (w *Worker) idempotentEffect(ctx context.Context, fl *inflight, md *jetstream.MsgMetadata) (verdict, natsjs.Effect, error) {
	mine := natsjs.Effect{Started: natsjs.EffectStarted{Worker: w.cfg.ID}}
	if md != nil && md.NumDelivered <= 1 {
		return verdictRun, mine, nil
	}
	_, _, stored, err := w.storedResult(ctx, fl.task)
	if err != nil {
		return 0, mine, err
	}
	if stored {
		return verdictAnswered, mine, nil
	}
	return verdictRun, natsjs.Effect{Started: natsjs.EffectStarted{Worker: "an earlier delivery"}}, nil
}

// storedResult looks the attempt's result up in the results stream: the
// last message on the task's result subject (a direct get by subject, which
// a worker user may make only on its tools' result subjects), stored for
// this attempt or a later one.
func (w *Worker) storedResult(ctx context.Context, task protocol.Task) (seq uint64, status protocol.Status, ok bool, err error) {
	msg, err := direct.Last(ctx, w.cfg.Conn, w.names.Results, w.subj.Result(task.ConversationID, task.TaskID, task.Tool))
	if err != nil {
		return 0, "", false, fmt.Errorf("look the stored result up: %w", err)
	}
	if msg == nil {
		return 0, "", false, nil
	}
	var r protocol.Result
	if err := json.Unmarshal(msg.Data, &r); err != nil || r.Attempt < task.Attempt {
		return 0, "", false, nil //nolint:nilerr // a result that does not decode is no result of this attempt
	}
	if r.Status == "" {
		r.Status = protocol.StatusOK
	}
	return msg.Seq, r.Status, true, nil
}

// unknownEffect is the result of an attempt whose effect is unknown: its
// tool was started by a worker that stopped, and is not run again; a
// person decides (approve: the call runs again as the next attempt).
func unknownEffect(e natsjs.Effect) protocol.Result {
	md := map[string]any{tool.EffectMetaKey: tool.EffectUnknown, "worker": e.Started.Worker}
	if !e.Started.At.IsZero() {
		md["started_at"] = e.Started.At.UTC().Format(time.RFC3339Nano)
	}
	return protocol.Result{Status: protocol.StatusApprovalRequired, Metadata: md,
		Message: "the worker that started this call stopped before its result was stored; it was not run again"}
}

// finishEffect completes the held attempt's entry once its result is
// stored at seq: a compare-and-set on the entry's revision, published
// asynchronously on the ledger's KV subject (w.ledgerJS), so that the
// task's acknowledgement does not wait for it. Nothing waits for it: the
// result is stored, and a delivery of the attempt that finds the entry
// still only started (the worker died, or was cut off, before the update
// was stored) finds the stored result in the results stream and is
// answered from it (beginEffect). A failure is logged by the ledger's
// publish error handler (ledgerPublishFailed); Stop waits for the updates
// still unacknowledged.
func (w *Worker) finishEffect(log *slog.Logger, fl *inflight, status protocol.Status, seq uint64) {
	h := fl.effect
	if h == nil {
		return
	}
	data, err := json.Marshal(natsjs.Effect{Started: h.started, Finished: &natsjs.EffectFinished{Status: status, ResultSeq: seq}})
	// h.rev is read after the tool returned: its checkpoints (the same
	// goroutine's, or ones it waited for) are done.
	if err == nil {
		m := nats.NewMsg(w.effectsSubject + h.key)
		m.Header.Set(jetstream.ExpectedLastSubjSeqHeader, strconv.FormatUint(h.rev, 10))
		m.Data = data
		_, err = w.ledgerJS.PublishMsgAsync(m)
	}
	if err != nil {
		log.Warn("effect entry not finished; a redelivery finds the stored result", slog.String("key", h.key), slog.Any("error", err))
	}
}

// ledgerPublishFailed is the ledger's async publish error handler: an
// update of finished that the server refused or did not acknowledge.
func (w *Worker) ledgerPublishFailed(_ jetstream.JetStream, m *nats.Msg, err error) {
	w.log.Warn("effect entry not finished; a redelivery finds the stored result",
		slog.String("key", strings.TrimPrefix(m.Subject, w.effectsSubject)), slog.Any("error", err))
}

// drainLedger waits, within ctx, for the finished updates still
// unacknowledged, then releases the ledger's async publisher (its reply
// subscription and connection listener).
func (w *Worker) drainLedger(ctx context.Context) {
	if w.ledgerJS == nil {
		return
	}
	if w.cfg.Conn.IsConnected() {
		ctx, cancel := context.WithTimeout(ctx, jsop.Timeout)
		select {
		case <-w.ledgerJS.PublishAsyncComplete():
		case <-ctx.Done():
			w.log.Warn("stopping with effect entries not finished; a redelivery finds the stored results",
				slog.Int("pending", w.ledgerJS.PublishAsyncPending()))
		}
		cancel()
	}
	w.ledgerJS.CleanupPublisher()
}

// withdrawEffect deletes the held attempt's entry: its tool returned on
// the worker's shutdown (it honoured its cancellation), and the task is
// handed back to run on another replica. A failure is logged: the next
// delivery then finds the attempt started (unknown, or run again when
// idempotent).
func (w *Worker) withdrawEffect(log *slog.Logger, fl *inflight) {
	h := fl.effect
	if h == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), jsop.Timeout)
	defer cancel()
	if _, err := w.effects.Delete(ctx, h.key, h.rev); err != nil {
		log.Warn("effect entry not withdrawn on hand-back", slog.String("key", h.key), slog.Any("error", err))
	}
}
