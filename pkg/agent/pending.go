package agent

import "github.com/offload-dev/offload/pkg/deferred"

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
