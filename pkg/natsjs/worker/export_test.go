package worker

import "time"

// HeartbeatEvery returns the interval of w's in-progress acks, set by
// Start from its consumers' ack wait.
func HeartbeatEvery(w *Worker) time.Duration { return w.heartbeatEvery }

// SetAfterResultStored makes w call f after it has stored a task's result
// and before it acknowledges the delivery: the moment a fault test cuts the
// worker off.
func SetAfterResultStored(w *Worker, f func()) { w.afterResultStored.Store(&f) }

// StartedEntry returns the ledger entry a worker with ID id writes for an
// attempt it starts at at.
func StartedEntry(id string, at time.Time) ([]byte, error) {
	prefix, err := startedPrefix(id)
	if err != nil {
		return nil, err
	}
	w := &Worker{startedPrefix: prefix}
	return w.startedEntry(at), nil
}

// SpanNames returns the names w gives the spans of a task of toolName
// delivered on subject: its task's and its tool's.
func SpanNames(w *Worker, subject, toolName string) (task, tool string) {
	return w.taskSpanName(subject, toolName), w.toolSpanName(toolName)
}

// MaxHolderDeliveries is how many deliveries an answer's attempt takes to
// reach its holder before another worker runs it.
const MaxHolderDeliveries = maxHolderDeliveries

// SetPumpLook makes w's pumps look at their queues unwoken only every d:
// a test then sees what wakes them.
func SetPumpLook(w *Worker, d time.Duration) { w.pumpLook.Store(int64(d)) }
