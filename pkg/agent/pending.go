package agent

import (
	"context"
	"encoding/json"
	"time"

	"github.com/offload-dev/offload/pkg/deferred"
)

// KindBackground is the kind of a pending background task: a call that
// runs on after its run paused and whose outcome a later run delivers.
const KindBackground deferred.Kind = "background"

// PendingTask is one call a paused conversation waits for: a deferred call
// (kind approval or external) or a background task that outlived its run
// (kind background). Its JSON form is stable: a conversation store saves it
// as it is.
type PendingTask struct {
	// TaskID is the call's ULID task ID: the deferred call's, stable
	// across resumes, or the background task's.
	TaskID string `json:"task_id"`
	// Kind is deferred.KindApproval, deferred.KindExternal or
	// KindBackground.
	Kind deferred.Kind `json:"kind"`
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
	// ([Handoff]). A later run waits for its result until then (and a
	// grace), not longer.
	Deadline time.Time `json:"deadline,omitzero"`
}

// PendingRecord is what a paused run leaves pending: its deferred calls
// and the background tasks still running for it. Result.PendingRecord
// builds it; the conversation store keeps it so that decisions, answers and
// late outcomes can be checked against it and delivered by a later run.
type PendingRecord struct {
	// ConversationID and RunID name the run that paused.
	ConversationID string `json:"conversation_id"`
	RunID          string `json:"run_id"`
	// Tasks lists the pending calls: approvals, external calls, then
	// background tasks, each in the order they were made.
	Tasks []PendingTask `json:"tasks"`
}

// PendingRecord returns what the run left pending, or nil when nothing is.
func (r *Result) PendingRecord() *PendingRecord {
	if r == nil || !r.Paused() {
		return nil
	}
	rec := &PendingRecord{ConversationID: r.ConversationID, RunID: r.RunID, Tasks: []PendingTask{}}
	if d := r.Deferred; d != nil {
		for _, p := range PendingOf(d) {
			rec.Tasks = append(rec.Tasks, PendingTask{TaskID: p.TaskID, Kind: p.Kind, Tool: p.Tool, ToolCallID: p.ToolCallID, Args: p.Args, Metadata: d.Metadata[p.ToolCallID]})
		}
	}
	rec.Tasks = append(rec.Tasks, r.Background...)
	return rec
}

// LiveBackground returns the run's background tasks whose outcomes have
// not reached the model yet (running, or finished and waiting for the next
// model request), as pending tasks in start order. ctx is the context a
// capability hook was called with; outside a run with [BackgroundTools]
// it returns nil. A conversation store saves them with the history at each
// step, so that a later run delivers their outcomes if this process dies.
func (i *RunInfo) LiveBackground(ctx context.Context) []PendingTask {
	br := bgRunOf(ctx)
	if br == nil {
		return nil
	}
	br.mu.Lock()
	defer br.mu.Unlock()
	out := make([]PendingTask, 0, len(br.live))
	for _, t := range br.live {
		out = append(out, t.pending())
	}
	return out
}
