package conformance

// TaskRule returns the rule of a task (the Go worker's worker.Rules) that
// the kit's rule checks, or "" for a rule of the worker process.
func TaskRule(rule string) string {
	for _, r := range rules {
		if r.name == rule {
			return r.taskRule
		}
	}
	return ""
}
