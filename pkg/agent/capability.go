package agent

import (
	"context"
	"encoding/json"

	"github.com/offload-dev/offload/pkg/deferred"
	"github.com/offload-dev/offload/pkg/message"
	"github.com/offload-dev/offload/pkg/tool"
)

// Capability is a composable extension of a run. A capability implements
// any of the hook interfaces below ([RunWrapper], [ToolsPreparer],
// [InstructionsProvider], [ModelRequestHook], [StepHook], [ToolCallPreparer],
// [ToolCallWrapper], [DeferredHandler]); the agent looks each one up with a type assertion, so
// a capability implements only what it needs. Capabilities run in the order
// they are given: agent capabilities first, then the run's.
type Capability any

// RunWrapper wraps the whole run. next runs the rest of the run (inner
// wrappers and the loop); a wrapper may start work before it and must stop
// it after (e.g. cancel background tasks).
type RunWrapper interface {
	WrapRun(ctx context.Context, info *RunInfo, next func(context.Context) (*Result, error)) (*Result, error)
}

// ToolsPreparer may change the tools offered at a step (add, remove, change
// schemas). It runs once per step, in capability order.
type ToolsPreparer interface {
	PrepareTools(ctx context.Context, info *RunInfo, tools []*tool.Tool) ([]*tool.Tool, error)
}

// InstructionsProvider adds text to the system prompt of a new conversation.
type InstructionsProvider interface {
	Instructions() string
}

// ModelRequestHook runs between model requests: before each request, after
// queued messages were added. It may add parts to the request (e.g.
// follow-up messages) through info.
type ModelRequestHook interface {
	BeforeModelRequest(ctx context.Context, info *RunInfo, req *message.Message) error
}

// StepHook runs after each model response has been handled (its tool calls
// executed, deferred or answered). final is true when the run is about to
// end with output; returning more parts keeps the run going with one more
// model request carrying them (e.g. a background result arriving while the
// model thought it was done).
type StepHook interface {
	AfterStep(ctx context.Context, info *RunInfo, final bool) ([]message.Part, error)
}

// ToolCallPreparer runs before a call's arguments are validated, in
// capability order. It may rewrite the arguments to validate (remove a
// flag meant for the capability), refuse them with a *tool.ModelRetry (a
// retry prompt that uses the tool's retry budget), and name the task that
// will run the call (shown in the tool_call event and given to the
// [ToolCallWrapper]s as ToolCall.TaskID). Any other error ends the run.
type ToolCallPreparer interface {
	PrepareToolCall(ctx context.Context, info *RunInfo, call *PreparedCall) error
}

// PreparedCall is a tool call about to be validated, for
// [ToolCallPreparer].
type PreparedCall struct {
	// Tool is the called tool, as prepared for this step.
	Tool *tool.Tool
	// Call is the model's call part; it stays in the history as it is.
	Call message.ToolCall
	// Args are the raw arguments that will be validated and given to the
	// tool; a preparer may change them.
	Args string
	// Deferred is true when the call will not run now (its tool requires
	// approval or is external).
	Deferred bool
	// DeferredTaskID is the task ID the call got when it was deferred (it
	// now runs because it was approved); a preparer naming the call's task
	// reuses it, so that one ID names the call throughout.
	DeferredTaskID string
	// TaskID, when a preparer sets it, names the task that will run the
	// call.
	TaskID string
}

// ToolCall describes one tool call being executed, for [ToolCallWrapper].
type ToolCall struct {
	// Tool is the tool's definition.
	Tool *tool.Tool
	// Call is the model's call part.
	Call message.ToolCall
	// Args are the validated arguments.
	Args json.RawMessage
	// RunContext is the call's context.
	RunContext *tool.RunContext
	// TaskID is the task ID a [ToolCallPreparer] gave the call, if any.
	TaskID string
}

// ToolCallFunc executes a tool call.
type ToolCallFunc func(ctx context.Context, call *ToolCall) (any, error)

// ToolCallWrapper wraps the execution of every tool call (after argument
// validation): it may run the call elsewhere (a worker), in the background,
// or not at all. Wrappers nest in capability order, the first outermost.
type ToolCallWrapper interface {
	WrapToolCall(ctx context.Context, call *ToolCall, next ToolCallFunc) (any, error)
}

// DeferredHandler resolves deferred calls inline. It is asked once per step
// with the calls still unresolved; returning nil or empty results declines.
type DeferredHandler interface {
	HandleDeferred(ctx context.Context, rc *tool.RunContext, reqs *deferred.Requests) (*deferred.Results, error)
}

// DeferredHandlerFunc is the handler of [HandleDeferredToolCalls].
type DeferredHandlerFunc func(ctx context.Context, rc *tool.RunContext, reqs *deferred.Requests) (*deferred.Results, error)

type deferredHandler struct{ fn DeferredHandlerFunc }

func (h deferredHandler) HandleDeferred(ctx context.Context, rc *tool.RunContext, reqs *deferred.Requests) (*deferred.Results, error) {
	return h.fn(ctx, rc, reqs)
}

// HandleDeferredToolCalls returns a capability that resolves deferred calls
// inline with fn. Several form a chain: each sees only what the previous
// ones left unresolved, and what no handler resolves ends the run with
// DeferredToolRequests (when allowed).
func HandleDeferredToolCalls(fn DeferredHandlerFunc) Capability { return deferredHandler{fn: fn} }

// RunInfo describes the run to capabilities.
type RunInfo struct {
	// RunID and ConversationID identify the run.
	RunID, ConversationID string
	// Deps is the run's dependencies value.
	Deps any
	r    *run
}

// Usage returns the run's usage so far.
func (i *RunInfo) Usage() message.Usage { return i.r.usageSnapshot() }

// History returns a copy of the run's history so far.
func (i *RunInfo) History() message.History { return i.r.historySnapshot() }

// Emit sends an event to the run's observers. The final event belongs to
// the run: an EventFinal given here is dropped, and so is every event once
// the run's final event was sent.
func (i *RunInfo) Emit(e Event) {
	if e.Type == EventFinal {
		return
	}
	i.r.emit(e)
}

// ReserveToolCalls adds n (possibly negative) to the run's tool call count,
// for calls that hold a slot while they run elsewhere.
func (i *RunInfo) ReserveToolCalls(n int) { i.r.addToolCalls(n) }
