package remote

import "github.com/offload-dev/offload/pkg/natsjs/internal/taskmem"

// LimitDone makes d remember at most limit answered and cancelled tasks
// exactly (instead of taskmem.DefaultLimit), forgetting those it
// remembers, so that a test sees the eviction after a few calls.
func LimitDone(d *Dispatcher, limit int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.mem = taskmem.New(d.cfg.DedupWindow, limit)
}

// RemembersExactly reports whether d remembers task exactly (not evicted).
func RemembersExactly(d *Dispatcher, task string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.mem.Exact(task)
}

// TaskNames returns d's task subject and dispatch span name for toolName.
func TaskNames(d *Dispatcher, toolName string) (subject, span string) {
	n := d.taskNames(toolName)
	return n.subject, n.span
}

// MaxTaskNames is the bound on the tools whose names a dispatcher keeps.
const MaxTaskNames = maxTaskNames
