package agent

import (
	"context"

	"github.com/offload-dev/offload/pkg/deferred"
)

// PendingRecord returns what the run left pending, or nil when nothing is:
// its deferred calls (approvals, then external calls), then its background
// tasks still running.
func (r *Result) PendingRecord() *deferred.PendingRecord {
	if r == nil || !r.Paused() {
		return nil
	}
	rec := &deferred.PendingRecord{ConversationID: r.ConversationID, RunID: r.RunID, Tasks: []deferred.PendingTask{}}
	rec.Tasks = append(rec.Tasks, r.Deferred.Pending()...)
	rec.Tasks = append(rec.Tasks, r.Background...)
	return rec
}

// LiveBackground returns the run's background tasks whose outcomes have
// not reached the model yet (running, or finished and waiting for the next
// model request), as pending tasks in start order. ctx is the context a
// capability hook was called with; outside a run with [BackgroundTools]
// it returns nil. A conversation store saves them with the history at each
// step, so that a later run delivers their outcomes if this process dies.
func (i *RunInfo) LiveBackground(ctx context.Context) []deferred.PendingTask {
	br := bgRunOf(ctx)
	if br == nil {
		return nil
	}
	br.mu.Lock()
	defer br.mu.Unlock()
	out := make([]deferred.PendingTask, 0, len(br.live))
	for _, t := range br.live {
		out = append(out, t.pending())
	}
	return out
}
