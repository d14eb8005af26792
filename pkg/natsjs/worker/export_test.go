package worker

import "time"

// HeartbeatEvery returns the interval of w's in-progress acks, set by
// Start from its consumers' ack wait.
func HeartbeatEvery(w *Worker) time.Duration { return w.heartbeatEvery }
