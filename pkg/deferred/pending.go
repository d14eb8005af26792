package deferred

import (
	"encoding/json"
	"time"

	"github.com/offload-dev/offload/pkg/message"
)

// KindBackground is the kind of a pending background task: a call that
// runs on after its run paused and whose outcome a later run delivers.
const KindBackground Kind = "background"

// PendingTask is one call a paused conversation waits for: a deferred call
// (kind approval or external) or a background task that outlived its run
// (kind background). Its JSON form is stable: a conversation store saves it
// as it is, and a paused run's final event lists it.
type PendingTask struct {
	// TaskID is the call's ULID task ID: the deferred call's, stable
	// across resumes, or the background task's.
	TaskID string `json:"task_id"`
	// Kind is KindApproval, KindExternal or KindBackground.
	Kind Kind `json:"kind"`
	// Tool and ToolCallID identify the model's call.
	Tool       string `json:"tool"`
	ToolCallID string `json:"tool_call_id"`
	// Args are the call's arguments as the model sent them (a background
	// task's validated arguments).
	Args json.RawMessage `json:"args"`
	// Metadata is the deferral's metadata (deferred calls only).
	Metadata map[string]any `json:"metadata,omitempty"`
	// Attempt counts dispatches of a background task: 0 for the first.
	Attempt int `json:"attempt"`
	// StartedAt is when a background task started (zero for deferred
	// calls).
	StartedAt time.Time `json:"started_at,omitzero"`
	// Deadline, when set, is the task's deadline: that of an inline call
	// handed off as a background task when its run was suspended
	// (agent.Handoff). A later run waits for its result until then (and a
	// grace), not longer.
	Deadline time.Time `json:"deadline,omitzero"`
	// Required, for an approval, is its quorum (SPEC §12, approval
	// {required: N}): how many distinct authenticated identities must
	// approve the call before it runs. 0 and 1: one decision decides.
	Required int `json:"required,omitempty"`
	// NonBlocking marks an approval or external call that did not stop its
	// run (SPEC §12): the model got an acknowledgement, and the decision or
	// answer reaches it as a follow-up message, like a background outcome.
	// Any one arrival for it is enough to continue the conversation.
	NonBlocking bool `json:"nonblocking,omitempty"`
	// Expiry, for an approval whose policy has a timeout (SPEC §12), is
	// that timeout as the call's agent set it: a decision by "timeout"
	// is admitted only when it is what Expiry decides, stored After the
	// call's deferral (conversation.State.Admit).
	Expiry *Expiry `json:"expiry,omitempty"`
}

// Expiry is an approval's timeout (SPEC §12): no decision stored After
// the call's deferral (its task ID's time), the call is decided
// OnTimeout ("deny", "approve" or "fail"), a denial telling the model
// Message.
type Expiry struct {
	After     time.Duration `json:"after"`
	OnTimeout string        `json:"on_timeout,omitempty"`
	Message   string        `json:"message,omitempty"`
}

// Background reports whether the task is a background task (not a
// deferred call waiting for a decision or an answer).
func (t PendingTask) Background() bool { return t.Kind == KindBackground }

// PendingRecord is what a paused run leaves pending: its deferred calls
// and the background tasks still running for it (agent.Result.PendingRecord
// builds it). The conversation store keeps it so that decisions, answers
// and late outcomes can be checked against it and delivered by a later run.
type PendingRecord struct {
	// ConversationID and RunID name the run that paused.
	ConversationID string `json:"conversation_id"`
	RunID          string `json:"run_id"`
	// Tasks lists the pending calls: approvals, external calls, then
	// background tasks, each in the order they were made.
	Tasks []PendingTask `json:"tasks"`
}

// Pending returns the deferred calls of r as pending tasks: approvals
// first, then external calls, each with its task ID and metadata.
func (r *Requests) Pending() []PendingTask {
	if r == nil {
		return nil
	}
	var out []PendingTask
	add := func(kind Kind, calls []message.ToolCall) {
		for _, c := range calls {
			out = append(out, PendingTask{TaskID: r.TaskIDs[c.ToolCallID], Kind: kind, Tool: c.ToolName,
				ToolCallID: c.ToolCallID, Args: c.ArgsJSON(), Metadata: r.Metadata[c.ToolCallID]})
		}
	}
	add(KindApproval, r.Approvals)
	add(KindExternal, r.Calls)
	return out
}
