package a2aface

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/a2aproject/a2a-go/v2/a2a"

	"github.com/offload-dev/offload/pkg/conversation"
	"github.com/offload-dev/offload/pkg/deferred"
	"github.com/offload-dev/offload/pkg/pending"
	"github.com/offload-dev/offload/pkg/protocol"
	"github.com/offload-dev/offload/pkg/service"
)

// OutputArtifact is the ID of a completed task's artifact: the agent's
// answer.
const OutputArtifact a2a.ArtifactID = "output"

// Waiting is one call a task waiting for input lists in its status
// message's data part ({"pending":[…]}).
type Waiting struct {
	TaskID     string          `json:"task_id"`
	Tool       string          `json:"tool"`
	Kind       deferred.Kind   `json:"kind"`
	Args       json.RawMessage `json:"args"`
	ArgsDigest string          `json:"args_digest"`
	ExpiresAt  string          `json:"expires_at,omitempty"`
	OnTimeout  string          `json:"on_timeout,omitempty"`
	ToolCallID string          `json:"tool_call_id,omitempty"`
	// Required is the approvals a quorum needs, when more than one.
	Required    int    `json:"required,omitempty"`
	Description string `json:"description,omitempty"`
}

// task returns the task of rec as it is now: its terminal state once
// recorded, else the state of its conversation (settled in the record
// when it is terminal).
func (f *Face) task(ctx context.Context, rec *Record) (*a2a.Task, error) {
	t := &a2a.Task{ID: a2a.TaskID(rec.ID), ContextID: rec.ContextID, History: rec.History,
		Metadata: map[string]any{"conversation_id": rec.Conversation, "agent": rec.Agent}}
	if rec.State != "" {
		f.ended(t, rec)
		return t, nil
	}
	at := rec.Created
	t.Status = a2a.TaskStatus{State: a2a.TaskStateSubmitted, Timestamp: &at}
	if !rec.Started {
		return t, nil
	}
	cv, err := f.cfg.Core.Get(ctx, rec.Conversation)
	if errors.Is(err, conversation.ErrNotFound) {
		return t, nil
	}
	if err != nil {
		return nil, err
	}
	at = cv.UpdatedAt
	switch cv.Status {
	case conversation.StatusFinished, conversation.StatusFailed:
		state, output, why := a2a.TaskStateCompleted, cv.Output, ""
		if cv.Status == conversation.StatusFailed {
			state, output, why = a2a.TaskStateFailed, "", cv.Error
			if strings.Contains(why, service.ErrCancelled.Error()) {
				state = a2a.TaskStateCanceled
			}
		}
		settled, err := f.settle(ctx, rec, state, output, why)
		if err != nil {
			return nil, err
		}
		f.ended(t, settled)
		return t, nil
	case conversation.StatusPaused:
		calls, err := f.waiting(ctx, rec, cv.Pending)
		if err != nil {
			return nil, err
		}
		if len(calls) > 0 {
			t.Status = a2a.TaskStatus{State: a2a.TaskStateInputRequired, Timestamp: &at, Message: inputMessage(rec, calls)}
			return t, nil
		}
	}
	// Running, or paused on the workers (background tasks, results to
	// come) or on nothing held (a replica wakes it).
	t.Status = a2a.TaskStatus{State: a2a.TaskStateWorking, Timestamp: &at}
	return t, nil
}

// ended sets t's status and artifacts from rec's terminal state.
func (f *Face) ended(t *a2a.Task, rec *Record) {
	at := rec.Updated
	t.Status = a2a.TaskStatus{State: rec.State, Timestamp: &at}
	switch rec.State {
	case a2a.TaskStateCompleted:
		t.Artifacts = []*a2a.Artifact{outputArtifact(rec.Output)}
		t.Status.Message = agentMessage(rec, a2a.NewTextPart(rec.Output))
	case a2a.TaskStateFailed, a2a.TaskStateCanceled:
		if rec.Error != "" {
			t.Status.Message = agentMessage(rec, a2a.NewTextPart(rec.Error))
		}
	}
}

// outputArtifact is a completed task's artifact.
func outputArtifact(output string) *a2a.Artifact {
	return &a2a.Artifact{ID: OutputArtifact, Name: "output", Parts: a2a.ContentParts{a2a.NewTextPart(output)}}
}

// agentMessage is a message of the agent in rec's task.
func agentMessage(rec *Record, parts ...*a2a.Part) *a2a.Message {
	m := a2a.NewMessage(a2a.MessageRoleAgent, parts...)
	m.TaskID, m.ContextID = a2a.TaskID(rec.ID), rec.ContextID
	return m
}

// inputMessage is the status message of a task waiting for input: what
// waits, in words and as the data part {"pending":[…]}.
func inputMessage(rec *Record, calls []Waiting) *a2a.Message {
	var b strings.Builder
	for i, c := range calls {
		if i > 0 {
			b.WriteString("; ")
		}
		if c.Kind == deferred.KindApproval {
			fmt.Fprintf(&b, "%s(%s) waits for an approval", c.Tool, c.Args)
		} else {
			fmt.Fprintf(&b, "%s(%s) waits for its answer", c.Tool, c.Args)
		}
	}
	b.WriteString(`: send a message to this task with a data part {"decisions":[{"task_id","approved","message"?,"override_args"?}],"answers":[{"task_id","content"}]}`)
	return agentMessage(rec, a2a.NewTextPart(b.String()), a2a.NewDataPart(map[string]any{"pending": calls}))
}

// waiting returns the calls of pend that wait for people and hold the
// run (a non-blocking call does not): as the desk tells them when their
// record holds them already (their expiry, quorum), else as the
// conversation's state does.
func (f *Face) waiting(ctx context.Context, rec *Record, pend []deferred.PendingTask) ([]Waiting, error) {
	var out []Waiting
	for _, t := range pend {
		if !slices.Contains(pending.ForPeople, t.Kind) || t.NonBlocking {
			continue
		}
		c, err := f.cfg.Desk.Call(ctx, rec.Conversation, t.TaskID)
		switch {
		case errors.Is(err, pending.ErrNotPending):
			c = &pending.Call{ConversationID: rec.Conversation, Agent: rec.Agent, PendingTask: t}
			if t.Kind == deferred.KindApproval && t.Expiry != nil && t.Expiry.After > 0 {
				if at := c.Requested(); !at.IsZero() {
					c.Expires, c.OnTimeout = at.Add(t.Expiry.After), t.Expiry.OnTimeout
				}
			}
		case err != nil:
			return nil, err
		}
		digest, _ := protocol.ArgsDigest(c.Args)
		w := Waiting{TaskID: c.TaskID, Tool: c.Tool, Kind: c.Kind, Args: c.Args, ArgsDigest: digest,
			ToolCallID: c.ToolCallID, Description: c.Description}
		if len(w.Args) == 0 {
			w.Args = json.RawMessage("{}")
		}
		if !c.Expires.IsZero() {
			w.ExpiresAt, w.OnTimeout = c.Expires.UTC().Format(time.RFC3339Nano), c.OnTimeout
		}
		if c.Required > 1 {
			w.Required = c.Required
		}
		out = append(out, w)
	}
	return out, nil
}

// settle records rec's terminal state (the first replica to record one
// wins: the record's is returned when it has one already).
func (f *Face) settle(ctx context.Context, rec *Record, state a2a.TaskState, output, why string) (*Record, error) {
	return f.change(ctx, rec.Owner, rec.ID, func(r *Record) bool {
		if r.State != "" {
			return false
		}
		r.State, r.Output, r.Error = state, output, why
		return true
	})
}

// changeTries bounds the rereads of a record that keeps changing.
const changeTries = 8

// change applies fn to owner's record id and stores it when fn reports
// a change, rereading it when it changed meanwhile; it returns the
// record as stored.
func (f *Face) change(ctx context.Context, owner, id string, fn func(*Record) bool) (*Record, error) {
	return f.write(ctx, owner, id, fn, true)
}

// write is change, touching the record's Updated (the time of an ended
// task's status) when touch: the pushes' bookkeeping does not.
func (f *Face) write(ctx context.Context, owner, id string, fn func(*Record) bool, touch bool) (*Record, error) {
	for range changeTries {
		r, rev, err := f.tasks.get(ctx, owner, id)
		if err != nil {
			return nil, err
		}
		if !fn(r) {
			return r, nil
		}
		if touch {
			r.Updated = f.cfg.Now().UTC()
		}
		if _, err := f.tasks.update(ctx, r, rev); err == nil {
			return r, nil
		} else if !errors.Is(err, conversation.ErrConflict) {
			return nil, err
		}
	}
	return nil, fmt.Errorf("a2aface: task %s: %w (%d tries)", id, conversation.ErrConflict, changeTries)
}
