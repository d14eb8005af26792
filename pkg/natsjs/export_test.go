package natsjs

// LimitDone makes d remember at most limit answered and cancelled tasks
// exactly (instead of doneCap), forgetting those it remembers, so that a
// test sees the eviction after a few calls.
func LimitDone(d *Dispatcher, limit int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.mem = newTaskMemory(d.cfg.Remember, limit)
}

// RemembersExactly reports whether d remembers task exactly (not evicted).
func RemembersExactly(d *Dispatcher, task string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	key, ok := doneKey(task)
	if !ok {
		return false
	}
	_, ok = d.mem.exact.get(key)
	return ok
}
