package remote

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/offload-dev/offload/pkg/natsjs"
	"github.com/offload-dev/offload/pkg/natsjs/internal/direct"
	"github.com/offload-dev/offload/pkg/natsjs/internal/jsop"
)

// A call's result is stored in the results stream before any consumer
// sees it, and stays there: a call never fails for a result the stream
// holds. Three rules keep it so when the dispatcher's results consumer or
// its connection is lost (the server cut a slow consumer, the network
// failed, the server restarted) and comes back:
//
//   - a results consumer starts at the sequence after the stream's last
//     (startSeq), never "new messages only": recreated by the client
//     after a reconnect before it delivered anything, it delivers what
//     was stored meanwhile instead of starting at the new last message;
//   - once the connection is back, or the consumer reported an error,
//     every call still waiting looks its result up in the stream (a
//     direct get of the task's result subject; recovery);
//   - a call's deadline, when it fires, looks the result up first, and
//     fails with DeadlineExceeded only when none is stored (expire).
//
// A result read by a lookup and delivered by the consumer as well
// answers its call once; the second is neither delivered nor refused.

// startSeq returns the stream sequence a results consumer made now starts
// at: the one after the last result stored.
func (d *Dispatcher) startSeq(ctx context.Context) (uint64, error) {
	name := natsjs.NamesFor(d.cfg.Prefix).Results
	s, err := d.js.Stream(ctx, name)
	if err != nil {
		return 0, fmt.Errorf("natsjs: dispatcher: results stream: %w", natsjs.Explain(ctx, d.js, "$JS.API.STREAM.INFO."+name, err))
	}
	return s.CachedInfo().State.LastSeq + 1, nil
}

// resultsConsumer is the configuration of a results consumer of filter
// starting at start.
func resultsConsumer(filter string, start uint64) jetstream.OrderedConsumerConfig {
	return jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{filter},
		DeliverPolicy:  jetstream.DeliverByStartSequencePolicy,
		OptStartSeq:    start,
	}
}

// consumeError is a results consumer's error handler: it logs err and,
// the consumer being recreated by the client, has the calls that wait
// look their results up.
func (d *Dispatcher) consumeError(conv string) jetstream.ConsumeErrHandler {
	return func(_ jetstream.ConsumeContext, err error) {
		if conv == "" {
			d.log.Warn("results consumer", slog.Any("error", err))
		} else {
			d.log.Warn("results consumer", slog.String("conversation_id", conv), slog.Any("error", err))
		}
		if d.cfg.Conn.IsConnected() {
			d.recoverCalls()
		}
	}
}

// recoverCalls has every call still waiting look its result up in the
// stream (by the recoverer, once for any number of requests made while it
// runs).
func (d *Dispatcher) recoverCalls() {
	select {
	case d.recoverReq <- struct{}{}:
	default:
	}
}

// recoverer runs the recoveries requested until ctx ends, then closes
// stopped.
func (d *Dispatcher) recoverer(ctx context.Context, stopped chan<- struct{}) {
	defer close(stopped)
	for {
		select {
		case <-ctx.Done():
			return
		case <-d.recoverReq:
			d.recoverAll(ctx)
		}
	}
}

// recoverAll looks up the stored result of every call that waits.
func (d *Dispatcher) recoverAll(ctx context.Context) {
	d.mu.Lock()
	waiting := slices.Collect(maps.Values(d.pending))
	d.mu.Unlock()
	answered := 0
	for _, h := range waiting {
		if ctx.Err() != nil {
			return
		}
		if d.lookUp(ctx, h) {
			answered++
		}
	}
	if answered > 0 {
		d.log.Info("calls answered from the results stream after their results consumer or the connection was lost",
			slog.Int("calls", answered), slog.Int("waiting", len(waiting)))
	}
}

// lookUp answers the call of h from its task's result stored in the
// stream, if one is; it reports whether h has its answer.
func (d *Dispatcher) lookUp(ctx context.Context, h *Handle) bool {
	ctx, cancel := context.WithTimeout(ctx, jsop.Timeout)
	defer cancel()
	task := h.task
	m, err := direct.Last(ctx, d.cfg.Conn, natsjs.NamesFor(d.cfg.Prefix).Results, d.subj.Result(task.ConversationID, task.TaskID, task.Tool))
	if err != nil {
		d.log.WarnContext(h.logCtx(), "the stored result of a waiting call not looked up", slog.String("task_id", task.TaskID), slog.Any("error", err))
		return false
	}
	if m != nil {
		d.route(m.Subject, m.Data, source{seq: m.Seq, recovery: true})
	}
	select {
	case <-h.done:
		return true
	default:
		return false
	}
}

// waits reports whether a call waits for task.
func (d *Dispatcher) waits(task string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	_, ok := d.pending[task]
	return ok
}

// recoveredAt is a result a recovery answered its call with: its stream
// sequence, and when.
type recoveredAt struct {
	seq uint64
	at  time.Time
}

// recoveredLocked records that task's call was answered by a recovery
// with the result at seq, which the consumer may deliver too. The
// records are kept for the dedup window.
func (d *Dispatcher) recoveredLocked(task string, seq uint64) {
	now := time.Now()
	maps.DeleteFunc(d.recovered, func(_ string, r recoveredAt) bool { return now.Sub(r.at) > d.cfg.DedupWindow })
	d.recovered[task] = recoveredAt{seq: seq, at: now}
}

// wasRecoveredLocked reports whether the result of task from src is the
// one a recovery answered its call with (forgotten then: it is
// delivered once more at most).
func (d *Dispatcher) wasRecoveredLocked(task string, src source) bool {
	r, ok := d.recovered[task]
	if !ok || src.msg == nil || r.seq != src.sequence() {
		return false
	}
	delete(d.recovered, task)
	return true
}
