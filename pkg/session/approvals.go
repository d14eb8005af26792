package session

import (
	"fmt"

	"github.com/offload-dev/offload/pkg/agent/background"
	"github.com/offload-dev/offload/pkg/conversation"
	"github.com/offload-dev/offload/pkg/deferred"
	"github.com/offload-dev/offload/pkg/metrics"
	"github.com/offload-dev/offload/pkg/protocol"
)

// timeoutDecider is the by of a decision written by an approval's timeout
// (SPEC §12): counted as expired, never as a person's denial.
const timeoutDecider = protocol.TimeoutDecider

// ExpiredText is what the model is told of a call of tool whose approval
// expired, denied by its timeout (SPEC §12), with the approval's message
// (background.DefaultExpiry when it has none), as a non-blocking call's
// follow-up says it.
func ExpiredText(tool, task, message string) string {
	if message == "" {
		message = background.DefaultExpiry
	}
	return fmt.Sprintf("Tool '%s' (task %s) was not approved in time: %s", tool, task, message)
}

// countDecision records decision d of task t's approval, arrived as a, in
// the approvals' metrics: its outcome, and the time from the call's
// deferral (the time of its task ID, when the approval was announced) to
// the decision's storing.
func (s *Session) countDecision(t deferred.PendingTask, a conversation.Arrival, d protocol.Decision) {
	if s.cfg.Approvals == nil {
		return
	}
	outcome := metrics.ApprovalDenied
	switch {
	case d.By == timeoutDecider:
		outcome = metrics.ApprovalExpired
	case d.Approved:
		outcome = metrics.ApprovalApproved
	}
	id, err := protocol.ParseID(t.TaskID)
	if err != nil {
		return // a stored task always has a ULID; nothing to time otherwise
	}
	s.cfg.Approvals.Decided(t.Tool, outcome, a.At.Sub(id.Timestamp()))
}
