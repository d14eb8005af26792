package deferred

import "fmt"

// ApprovalTimeoutError is the approval value, and the run's error, of a
// call whose approval expired with on_timeout fail (SPEC §12): the run
// ends with it, naming the call, and the model is not told of the expiry.
// Match it with errors.As.
type ApprovalTimeoutError struct {
	// Tool is the name of the call's tool.
	Tool string
	// TaskID is the call's task ID.
	TaskID string
}

// Error implements error.
func (e *ApprovalTimeoutError) Error() string {
	return fmt.Sprintf("approval of tool '%s' (task %s) timed out (on_timeout: fail)", e.Tool, e.TaskID)
}
