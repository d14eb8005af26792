package remote

import "log/slog"

// lookUpAgain reads, on a goroutine of its own, the result stored for the
// attempt of h, a task dispatched again (DispatchAgain): beside the wait
// for its result, not before the dispatch returns, so that a
// continuation's call costs no read more before its model request. The
// conversation's results consumer, made before the publish, delivers
// whatever is stored from then on; the read answers the call with a
// result stored before (SPEC §20). Stop waits for it.
func (d *Dispatcher) lookUpAgain(h *Handle) {
	d.mu.Lock()
	if !d.life.Running() || d.pending[h.task.TaskID] != h {
		d.mu.Unlock()
		return // answered or stopped meanwhile
	}
	d.readingAgain.Add(1)
	d.mu.Unlock()
	go func() {
		defer d.readingAgain.Done()
		if d.lookUp(d.ctx, h) {
			d.log.InfoContext(h.logCtx(), "a task dispatched again answered by the result stored for its attempt",
				slog.String("task_id", h.task.TaskID), slog.Int("attempt", h.task.Attempt))
		}
	}()
}
