package remote

import (
	"context"
	"log/slog"

	"github.com/nats-io/nats.go"

	"github.com/offload-dev/offload/pkg/progress"
	"github.com/offload-dev/offload/pkg/protocol"
)

// unrelayWhenDone calls stop once h is done, when ctx has a progress
// reporter (otherwise relayProgress relays nothing and there is nothing to
// stop: no goroutine is kept per pending task).
func unrelayWhenDone(ctx context.Context, h *Handle, stop func()) {
	if _, ok := progress.FromContext(ctx); !ok {
		return
	}
	go func() {
		<-h.Done()
		stop()
	}()
}

// relayProgress relays the worker's progress reports on task taskID (of
// conversation conv, a call of toolName) to whoever listens in ctx (the
// agent turns them into progress events), best effort, until the returned
// function is called. Call it before dispatching.
func (r *Toolset) relayProgress(ctx context.Context, conv, taskID, toolName string) (stop func()) {
	if _, ok := progress.FromContext(ctx); !ok {
		return func() {}
	}
	subject := protocol.Subjects{Prefix: r.cfg.Prefix}.Progress(conv, taskID, toolName)
	// On the dispatcher's connection: the server handles a connection's
	// messages in order, so the subscription exists before the task does.
	sub, err := r.cfg.Dispatcher.conn().Subscribe(subject, func(m *nats.Msg) {
		p, err := protocol.DecodeProgress(m.Data, taskID, nil)
		if err != nil {
			r.log.Debug("progress report refused", slog.String("task_id", taskID), slog.Any("error", err))
			return
		}
		if q := p.Queued; q != nil {
			progress.ReportQueued(ctx, taskID, p.Message, progress.Queued{Reason: q.Reason, Ahead: q.Ahead, Key: q.Key, Until: q.Until})
			return
		}
		progress.ReportTask(ctx, taskID, p.Message, p.Fraction)
	})
	if err != nil {
		r.log.Debug("progress not relayed", slog.String("task_id", taskID), slog.Any("error", err))
		return func() {}
	}
	return func() { _ = sub.Unsubscribe() }
}
