package worker

import "time"

// HeartbeatEvery returns the interval of w's in-progress acks, set by
// Start from its consumers' ack wait.
func HeartbeatEvery(w *Worker) time.Duration { return w.heartbeatEvery }

// SetAfterResultStored makes w call f after it has stored a task's result
// and before it finishes the attempt's ledger entry and acknowledges the
// delivery: the moment a fault test cuts the worker off.
func SetAfterResultStored(w *Worker, f func()) { w.afterResultStored.Store(&f) }
