package tool

import (
	"context"
	"encoding/json"
	"errors"

	"github.com/offload-dev/offload/pkg/message"
)

// Priority says when enqueued content reaches the model.
type Priority int

const (
	// PriorityASAP delivers the content before the next model request.
	PriorityASAP Priority = iota
	// PriorityWhenIdle delivers the content only when the model would
	// otherwise end the run.
	PriorityWhenIdle
)

// String returns "asap" or "when_idle".
func (p Priority) String() string {
	if p == PriorityWhenIdle {
		return "when_idle"
	}
	return "asap"
}

// RunControl is what a run lets its tools do to it. The agent implements it.
type RunControl interface {
	// Cancel ends the run with RunCancelled.
	Cancel()
	// Enqueue injects a user message at the next boundary.
	Enqueue(p Priority, content ...message.Content) error
}

// ErrNoRun is returned by [RunContext.Enqueue] when the context is not bound
// to a live run.
var ErrNoRun = errors.New("tool: no live run")

// RunContext is what a tool knows about the run that called it. A tool gets
// its own copy per call.
type RunContext struct {
	// RunID is the current run's ID.
	RunID string
	// ConversationID is the conversation's ID, stable across runs.
	ConversationID string
	// Tenant is the conversation's tenant (SPEC §19), when it has one:
	// the calls a worker runs carry it on their tasks, and limits keyed
	// by tenant hold per tenant.
	Tenant string
	// Agent is the name of the conversation's agent (agent serve's, SPEC
	// §11), when it has one: the calls a worker runs carry it on their
	// tasks, for limits keyed by agent.
	Agent string
	// ToolCallID is the model's ID of this call.
	ToolCallID string
	// ToolName is the name of the called tool.
	ToolName string
	// TaskID is the call's task ID (a ULID) when it runs as a task (on a
	// worker); empty otherwise.
	TaskID string
	// Attempt is the task's attempt (0 for the first dispatch of a call).
	Attempt int
	// IdempotencyKey is the attempt's idempotency key, "<TaskID>:<Attempt>"
	// (SPEC §13), when the call runs as a task: the same on every delivery
	// of the attempt, so that a tool whose side effect is keyed by it (a
	// payment API's idempotency key) has it once however often it runs;
	// empty otherwise.
	IdempotencyKey string
	// Again is true when the call's task and attempt may have been
	// dispatched before, by a process that stopped before it stored the
	// call's outcome: a continuation runs the calls of a stored step under
	// the task IDs the step names (SPEC §20). Such an attempt's worker may
	// have stored its result already and then answer the task again
	// without running it or publishing anything (SPEC §13): a tool that
	// runs the call as a task reads the result stored for the attempt
	// rather than only waiting for a new one.
	Again bool
	// ToolCallApproved is true when the call runs because a person approved it.
	ToolCallApproved bool
	// ToolCallMetadata is the metadata supplied with the approval, if any.
	ToolCallMetadata map[string]any
	// Retry is how many retries of this tool the run has used so far.
	Retry int
	// MaxRetries is the tool's retry budget.
	MaxRetries int
	// Usage is the run's usage when the call started.
	Usage message.Usage
	// Deps is the user's dependencies value given to the run.
	Deps any
	// Control lets the tool cancel the run or enqueue messages; nil outside a run.
	Control RunControl
	// Background is true when the call runs as a background task of its
	// run (a worker's task of mode background): a tool may then prefer a
	// long-running form of its work (an MCP tool requests an MCP task).
	Background bool
	// Checkpoint, set on a worker that keeps an effect-ledger entry for
	// the attempt (SPEC §13: a tool not declared idempotent), stores state
	// in that entry: a delivery of the attempt after this worker stopped
	// runs the tool again with it in Resume, where it would otherwise be
	// an unknown effect for a person. A tool records what lets it pick up
	// its work where it was (an MCP tool: its server and MCP task ID).
	// Nil elsewhere.
	Checkpoint func(ctx context.Context, state json.RawMessage) error
	// Resume is the state recorded with Checkpoint by the worker that
	// started the attempt and stopped before its result was stored; nil
	// for a first run. A tool given it must resume its work, not start it
	// again.
	Resume json.RawMessage
}

// Cancel ends the run with RunCancelled. It is a no-op outside a run.
func (rc *RunContext) Cancel() {
	if rc != nil && rc.Control != nil {
		rc.Control.Cancel()
	}
}

// Enqueue injects a user message at the next boundary of the run (before the
// next model request for PriorityASAP, when the model would end the run for
// PriorityWhenIdle). Calling it without content does nothing.
func (rc *RunContext) Enqueue(p Priority, content ...message.Content) error {
	if len(content) == 0 {
		return nil
	}
	if rc == nil || rc.Control == nil {
		return ErrNoRun
	}
	return rc.Control.Enqueue(p, content...)
}

// Return is a tool result with extras: Value goes to the model as the tool's
// return, Content is extra user content for the model (text or files), and
// Metadata is application-only (kept in history, never sent to the model).
type Return struct {
	Value    any
	Content  []message.Content
	Metadata map[string]any
}

// Run validates nothing and runs the tool's handler; it exists so that
// callers outside the agent (workers, tests) execute a tool exactly as the
// agent does. It returns ErrExternal for external tools.
func (t *Tool) Run(ctx context.Context, rc *RunContext, args json.RawMessage) (any, error) {
	if t.Handler == nil {
		return nil, ErrExternal
	}
	return t.Handler(ctx, rc, args)
}

// ErrExternal is returned when an external tool is asked to run here.
var ErrExternal = errors.New("External tools cannot be called")
