package mcpface

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/oklog/ulid/v2"

	"github.com/offload-dev/offload/pkg/conversation"
	"github.com/offload-dev/offload/pkg/protocol"
	"github.com/offload-dev/offload/pkg/service"
	"github.com/offload-dev/offload/pkg/session"
)

// MetaConversation is the _meta key of a task's conversation ID (SPEC
// §17), on a CreateTaskResult and a task's result.
const MetaConversation = "offload/conversation_id"

// record is a task's record: what the task is, stored once before its
// CreateTaskResult is answered.
type record struct {
	// Conversation is the task's conversation; Run the run its call
	// started.
	Conversation string `json:"conversation_id"`
	Run          string `json:"run_id"`
	// Agent is the tool called.
	Agent string `json:"agent"`
	// By is the name of the token that created it.
	By        string    `json:"by"`
	CreatedAt time.Time `json:"created_at"`
	// Cancelled is set by tasks/cancel: the task is cancelled whatever
	// its conversation does after.
	Cancelled bool `json:"cancelled,omitempty"`
}

// newTaskID is a new task ID: a ULID whose 80 bits of entropy are
// crypto/rand's (protocol.NewID's come from a time-seeded generator: not
// unguessable).
func newTaskID() string {
	return ulid.MustNew(ulid.Now(), rand.Reader).String()
}

// createTask serves a tools/call with a task: the agent's run started,
// the task's record stored, then its CreateTaskResult.
func (f *Face) createTask(ctx context.Context, params json.RawMessage) answer {
	c := callerOf(ctx)
	if !c.Start {
		return answer{err: forbidden("only an operator calls an agent")}
	}
	var p struct {
		Name      string          `json:"name"`
		Arguments json.RawMessage `json:"arguments"`
	}
	if err := json.Unmarshal(params, &p); err != nil {
		return answer{err: invalidParams("tools/call: %v", err)}
	}
	a, ok := f.agents[p.Name]
	if !ok {
		return answer{err: invalidParams("tool %q not found", p.Name)}
	}
	args, err := a.args(p.Arguments)
	if err != nil {
		return answer{err: err}
	}
	run, err := f.start(ctx, c, p.Name, args)
	if err != nil {
		return answer{err: err}
	}
	id := newTaskID()
	rec := record{Conversation: run.ConversationID, Run: run.ID, Agent: p.Name, By: c.Name, CreatedAt: f.cfg.Now().UTC()}
	raw, _ := json.Marshal(rec)
	if err := f.cfg.Tasks.Create(ctx, c.Owner, id, raw); err != nil {
		// No task to answer with: the run it started is cancelled.
		_ = f.cfg.Core.Cancel(context.WithoutCancel(ctx), run.ConversationID)
		return answer{err: fmt.Errorf("the task could not be stored: %w", err)}
	}
	t := f.taskOf(id, rec, mcp.TaskStatusWorking, "", rec.CreatedAt)
	return answer{result: map[string]any{"task": t, "_meta": map[string]any{MetaConversation: rec.Conversation}}}
}

// start starts agent's run on a's prompt: a new conversation, or the one
// a names.
func (f *Face) start(ctx context.Context, c Caller, agent string, a callArgs) (*service.Run, error) {
	ctx = service.WithStartedBy(ctx, c.Name)
	if a.ConversationID == "" {
		return f.coreErr(f.cfg.Core.StartConversation(ctx, agent, a.Prompt, ""))
	}
	if _, err := protocol.ParseID(a.ConversationID); err != nil {
		return nil, invalidParams("conversation_id %q is not a conversation's ID", a.ConversationID)
	}
	return f.coreErr(f.cfg.Core.StartThread(ctx, agent, a.Prompt, a.ConversationID))
}

// coreErr is run, or err as the protocol's error when it is a refusal.
func (f *Face) coreErr(run *service.Run, err error) (*service.Run, error) {
	if err == nil {
		return run, nil
	}
	var (
		ce *conversation.ClaimedError
		pe *session.PendingError
		te *session.TenantError
	)
	switch {
	case errors.As(err, &te):
		return nil, invalidParams("wrong_tenant: the conversation is not of the token's tenant")
	case errors.As(err, &ce), errors.Is(err, conversation.ErrClaimed):
		return nil, invalidParams("the conversation is running: wait for its run to end")
	case errors.Is(err, service.ErrOtherAgent):
		return nil, invalidParams("the conversation is another agent's")
	case errors.Is(err, service.ErrUnknownAgent):
		return nil, invalidParams("unknown agent")
	case errors.As(err, &pe), errors.Is(err, session.ErrNothingToResume):
		return nil, invalidParams("the conversation waits for calls: %v", err)
	}
	return nil, err
}

// taskOf is the MCP task id of rec with status.
func (f *Face) taskOf(id string, rec record, status mcp.TaskStatus, msg string, updated time.Time) mcp.Task {
	poll := f.cfg.PollInterval.Milliseconds()
	if updated.Before(rec.CreatedAt) {
		updated = rec.CreatedAt
	}
	return mcp.Task{TaskId: id, Status: status, StatusMessage: msg, CreatedAt: rec.CreatedAt.Format(time.RFC3339Nano),
		LastUpdatedAt: updated.UTC().Format(time.RFC3339Nano), PollInterval: &poll}
}

// taskParams are the params of tasks/get, tasks/result and tasks/cancel.
type taskParams struct {
	TaskID string `json:"taskId"`
}

// load returns the record of the task params names, the caller's: not
// found for another token's.
func (f *Face) load(ctx context.Context, params json.RawMessage) (string, record, error) {
	var p taskParams
	if err := json.Unmarshal(params, &p); err != nil || p.TaskID == "" {
		return "", record{}, invalidParams("taskId is missing")
	}
	c := callerOf(ctx)
	raw, err := f.cfg.Tasks.Get(ctx, c.Owner, p.TaskID)
	if errors.Is(err, conversation.ErrNotFound) {
		return "", record{}, invalidParams("task %s not found", p.TaskID)
	}
	if err != nil {
		return "", record{}, err
	}
	var rec record
	if err := json.Unmarshal(raw, &rec); err != nil {
		return "", record{}, fmt.Errorf("task %s: its record: %w", p.TaskID, err)
	}
	return p.TaskID, rec, nil
}

// state is a task's state: its MCP status and the conversation's view.
type state struct {
	status mcp.TaskStatus
	msg    string
	view   *service.Conversation
	// created is when the task was created.
	created time.Time
}

// terminal reports whether s is a task's end.
func (s state) terminal() bool {
	switch s.status {
	case mcp.TaskStatusCompleted, mcp.TaskStatusFailed, mcp.TaskStatusCancelled:
		return true
	}
	return false
}

// stateOf reads the state of task rec: its conversation's status mapped
// (SPEC §17): running → working; paused on people → input_required;
// paused otherwise (background tasks, a wake to come) → working;
// finished → completed; failed → failed, or cancelled when a cancel
// ended it; cancelled by tasks/cancel → cancelled.
func (f *Face) stateOf(ctx context.Context, rec record) (state, error) {
	v, err := f.cfg.Core.Get(ctx, rec.Conversation)
	if err != nil {
		return state{}, err
	}
	s := state{status: mcp.TaskStatusWorking, view: v, created: rec.CreatedAt}
	switch {
	case rec.Cancelled:
		s.status, s.msg = mcp.TaskStatusCancelled, "cancelled"
	case v.Status == "finished":
		s.status = mcp.TaskStatusCompleted
	case v.Status == "failed" && strings.HasPrefix(v.Error, service.ErrCancelled.Error()):
		s.status, s.msg = mcp.TaskStatusCancelled, v.Error
	case v.Status == "failed":
		s.status, s.msg = mcp.TaskStatusFailed, v.Error
	case v.Status == "paused":
		if people := forPeople(v); len(people) > 0 {
			s.status = mcp.TaskStatusInputRequired
			var what []string
			for _, p := range people {
				what = append(what, fmt.Sprintf("%s %s(%s)", p.Kind, p.Tool, p.Args))
			}
			s.msg = "waits for people: " + strings.Join(what, ", ")
		}
	}
	return s, nil
}

// getTask serves tasks/get.
func (f *Face) getTask(ctx context.Context, params json.RawMessage) answer {
	id, rec, err := f.load(ctx, params)
	if err != nil {
		return answer{err: err}
	}
	s, err := f.stateOf(ctx, rec)
	if err != nil {
		return answer{err: err}
	}
	return answer{result: f.taskOf(id, rec, s.status, s.msg, s.view.UpdatedAt)}
}

// listTasks serves tasks/list: the caller's tasks, all on one page.
func (f *Face) listTasks(ctx context.Context) answer {
	c := callerOf(ctx)
	tasks := []mcp.Task{}
	var failed error
	err := f.cfg.Tasks.List(ctx, c.Owner, func(id string, raw []byte) bool {
		var rec record
		if err := json.Unmarshal(raw, &rec); err != nil {
			return true
		}
		s, err := f.stateOf(ctx, rec)
		if errors.Is(err, conversation.ErrNotFound) {
			return true // its conversation is gone: so is the task
		}
		if err != nil {
			failed = err
			return false
		}
		tasks = append(tasks, f.taskOf(id, rec, s.status, s.msg, s.view.UpdatedAt))
		return true
	})
	if err = errors.Join(err, failed); err != nil {
		return answer{err: err}
	}
	return answer{result: map[string]any{"tasks": tasks}}
}

// cancelTask serves tasks/cancel: the conversation's live run cancelled
// wherever it runs, the task recorded cancelled (a task that waits for
// people too: its calls stay in the inbox).
func (f *Face) cancelTask(ctx context.Context, params json.RawMessage) answer {
	c := callerOf(ctx)
	if !c.Start {
		return answer{err: forbidden("only an operator cancels a task")}
	}
	id, rec, err := f.load(ctx, params)
	if err != nil {
		return answer{err: err}
	}
	s, err := f.stateOf(ctx, rec)
	if err != nil {
		return answer{err: err}
	}
	if s.terminal() {
		return answer{err: invalidParams("task %s is %s already: it cannot be cancelled", id, s.status)}
	}
	if err := f.cfg.Core.Cancel(ctx, rec.Conversation); err != nil && !errors.Is(err, service.ErrNotRunning) {
		return answer{err: err}
	}
	rec.Cancelled = true
	raw, _ := json.Marshal(rec)
	if err := f.cfg.Tasks.Put(ctx, c.Owner, id, raw); err != nil {
		return answer{err: err}
	}
	return answer{result: f.taskOf(id, rec, mcp.TaskStatusCancelled, "cancelled", f.cfg.Now())}
}
