package conversation

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/offload-dev/offload/pkg/deferred"
	"github.com/offload-dev/offload/pkg/protocol"
)

// Vote is one approval counted for a call that needs a quorum (SPEC §12,
// approval {required: N}).
type Vote struct {
	// TaskID is the approval's task.
	TaskID string `json:"task_id"`
	// By is the approver's authenticated identity.
	By string `json:"by"`
	// Seq and At are the approval's stream sequence and stored time.
	Seq uint64    `json:"seq"`
	At  time.Time `json:"at"`
}

// VotesFor returns the approvals counted so far for task, in arrival
// order.
func (s *State) VotesFor(task string) []Vote {
	if s == nil {
		return nil
	}
	var out []Vote
	for _, v := range s.Votes {
		if v.TaskID == task {
			out = append(out, v)
		}
	}
	return out
}

// vote counts approval d of pt, a call that needs a quorum, and reports
// whether it is the last one needed (the call's arrival is then due).
func (s *State) vote(pt deferred.PendingTask, d protocol.Decision, identify func(protocol.Decision) (string, bool), seq uint64, at time.Time) (bool, error) {
	refuse := func(reason string, err error) error {
		return &RefusedError{Reason: reason, TaskID: pt.TaskID, Err: err}
	}
	if len(d.OverrideArgs) > 0 {
		return false, refuse(ReasonMalformed, errors.New("an approval of a call that needs a quorum cannot override its arguments (the others approved them as they are)"))
	}
	by, ok := "", false
	if identify != nil {
		by, ok = identify(d)
	}
	if !ok || by == "" {
		return false, refuse(ReasonUnauthenticated, fmt.Errorf("the call needs %d distinct authenticated approvers and this approval's identity (by %q) is not authenticated", pt.Required, d.By))
	}
	votes := s.VotesFor(pt.TaskID)
	if slices.ContainsFunc(votes, func(v Vote) bool { return v.By == by }) {
		return false, refuse(ReasonDuplicateIdentity, fmt.Errorf("%s already approved the call (%d of %d)", by, len(votes), pt.Required))
	}
	s.Votes = append(s.Votes, Vote{TaskID: pt.TaskID, By: by, Seq: seq, At: at.UTC()})
	return len(votes)+1 >= pt.Required, nil
}

// TrustBy is an identify function of [AdmitOptions] that takes a
// decision's by as its identity (agent serve --trust-nats-by).
func TrustBy(d protocol.Decision) (string, bool) { return d.By, d.By != "" }
