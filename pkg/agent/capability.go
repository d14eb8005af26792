package agent

import (
	"context"
	"encoding/json"
	"log/slog"

	"go.opentelemetry.io/otel/trace"

	"github.com/offload-dev/offload/pkg/deferred"
	"github.com/offload-dev/offload/pkg/message"
	"github.com/offload-dev/offload/pkg/tool"
)

// Capability is a composable extension of a run. A capability implements
// any of the hook interfaces below ([RunWrapper], [ToolsPreparer],
// [InstructionsProvider], [ModelRequestHook], [StepHook], [IdleHook],
// [ToolCallPreparer], [ToolCallWrapper], [DeferredHolder],
// [DeferredHandler], [HandoffKeeper], [StepRecorder]); the agent looks each one up with a
// type assertion, so a capability implements only what it needs.
// Capabilities run in the order they are given: agent capabilities first,
// then the run's.
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
// model request carrying them.
type StepHook interface {
	AfterStep(ctx context.Context, info *RunInfo, final bool) ([]message.Part, error)
}

// StepRecorder keeps a step durable while its tool calls run (SPEC §20),
// so that a run continuing the stored history after the process died asks
// the model nothing again and runs again nothing that ran: a durable
// conversation's store is one (session's Checkpointer). With one, the
// loop names every call of a model response by a task ID kept in the
// response's metadata, and calls RecordStep before the response's first
// call starts (and before its deferred calls are held or paused), before
// an in-process tool not declared idempotent starts (the call marked
// started), and as a call ends while others of its batch still run. A
// continued history that ends with such a response has its calls without
// an outcome run then (no model request first); one whose in-process tool
// not declared idempotent was started becomes an unknown effect for a
// person (SPEC §13): an approval with metadata offload.effect "unknown".
// An error of RecordStep ends the run.
type StepRecorder interface {
	// RecordStep stores info.History(), which ends with the response of
	// the step (with its step record), followed by a request of done, the
	// result parts of the step's calls that ended so far (none at first).
	RecordStep(ctx context.Context, info *RunInfo, done []message.Part) error
}

// IdleHook runs when the run is idle: once the model ended its turn
// without tool calls (right after the capability's own [StepHook], if it
// has one), and before a model request that carries nothing yet, such as
// the first of a run that continues a conversation with no prompt (right
// after the capability's own [ModelRequestHook]). It may hand the run what
// arrived, wait for work that runs elsewhere (background tasks), or end
// the run; see [Idle].
type IdleHook interface {
	WhenIdle(ctx context.Context, info *RunInfo) (Idle, error)
}

// Idle is what an [IdleHook] decided. The zero value lets the run go on
// as it would without the hook. At most one of Pause and Suspend is set;
// either ends the run at once (the hooks after it are not asked).
type Idle struct {
	// Parts go to the model with one more request (outcomes that arrived).
	Parts []message.Part
	// Pause ends the run paused (Result.Paused): what it waits for comes
	// later, to a run that continues the conversation; the capability
	// lists it in Result.Background as its RunWrapper returns.
	Pause bool
	// Suspend ends the run as a closed RunOptions.Suspend does
	// (Result.Suspended): the hook saw it closed while it waited.
	Suspend bool
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

// DeferredHolder takes deferred calls out of a step before the
// [DeferredHandler]s are asked: a held call gets its result at once (an
// acknowledgement the model reads) and its outcome reaches the model
// later, as the holder arranges (non-blocking calls, SPEC §12). The
// holders are asked once per step, in capability order, with the calls
// still unresolved (the deferred_tool_requests event lists them all).
type DeferredHolder interface {
	// HoldDeferred holds a call by setting its Result. The results set
	// stand also when it returns an error, which ends the run.
	HoldDeferred(ctx context.Context, info *RunInfo, calls []*DeferredCall) error
}

// DeferredCall is a deferred call of a step, for [DeferredHolder].
type DeferredCall struct {
	// Tool is the called tool, as prepared for this step.
	Tool *tool.Tool
	// Call is the model's call part.
	Call message.ToolCall
	// Task is the call as pending work: its task ID, kind, arguments (the
	// validated ones, else the model's), deferral metadata and the
	// attempt its task takes when it runs.
	Task deferred.PendingTask
	// Result, once a holder sets it, is the call's result part: the call
	// is held. A holder leaves alone the calls that have one already.
	Result message.Part
}

// HandoffKeeper keeps the calls tools hand off when the run suspends
// ([Handoff], [Suspending]): such a call goes on elsewhere and becomes
// work of the run that a later run finishes (package agent/background's
// capability is one). The first keeper whose Suspending is not nil keeps
// the call.
type HandoffKeeper interface {
	// Suspending returns the channel [Suspending] gives the call whose
	// context is ctx: closed when the run is asked to suspend; nil when
	// the keeper cannot keep that call.
	Suspending(ctx context.Context, info *RunInfo) <-chan struct{}
	// KeepHandoff takes over the call that h hands off (call.TaskID is
	// h's) and returns the call's result, an acknowledgement.
	KeepHandoff(ctx context.Context, info *RunInfo, call *ToolCall, h *Handoff) (any, error)
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
func (i *RunInfo) Usage() message.Usage { return i.r.state.usageSnapshot() }

// History returns a copy of the run's history so far.
func (i *RunInfo) History() message.History { return i.r.state.historySnapshot() }

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
func (i *RunInfo) ReserveToolCalls(n int) { i.r.state.addToolCalls(n) }

// CheckToolCalls returns the *UsageLimitExceeded that n more tool calls
// would cause, or nil: a batch is refused whole, before any of it runs.
func (i *RunInfo) CheckToolCalls(n int) error { return i.r.precheck(n) }

// UseRetry uses one retry of the named tool outside a step, for a call's
// retry that arrives later (a background call's ModelRetry). Past max it
// returns the *UnexpectedModelBehavior that ends the run.
func (i *RunInfo) UseRetry(toolName string, max int) error {
	return i.r.state.consumeLateRetry(toolName, max)
}

// Adopted returns the tasks earlier runs left to this one
// (RunOptions.Background).
func (i *RunInfo) Adopted() []AdoptedTask { return i.r.opts.Background }

// Suspend returns RunOptions.Suspend: closed when the run is asked to
// suspend (nil: never).
func (i *RunInfo) Suspend() <-chan struct{} { return i.r.opts.Suspend }

// Observed reports whether the run's events have an observer
// (RunOptions.OnEvent): without one, events need not be made early.
func (i *RunInfo) Observed() bool { return i.r.opts.OnEvent != nil }

// Cancelled reports whether the run was cancelled by RunContext.Cancel.
func (i *RunInfo) Cancelled() bool { return i.r.state.isCancelled() }

// AllowsDeferred reports whether the run may pause on deferred calls
// (Config.AllowDeferred or RunOptions.AllowDeferred).
func (i *RunInfo) AllowsDeferred() bool { return i.r.allowDeferred }

// FailOnToolError reports Config.FailOnToolError: an unexpected tool error
// ends the run.
func (i *RunInfo) FailOnToolError() bool { return i.r.a.cfg.FailOnToolError }

// HasQueued reports whether messages that tools enqueued wait for the
// next model request: a hook waiting while the run is idle stops then.
func (i *RunInfo) HasQueued() bool { return i.r.state.hasQueued() }

// Logger returns the run's logger: the agent's, with the run's IDs.
func (i *RunInfo) Logger() *slog.Logger { return i.r.logger() }

// Tracer returns the agent's tracer (a no-op one without
// Config.TracerProvider).
func (i *RunInfo) Tracer() trace.Tracer { return i.r.a.tracer }

// Tools returns the tools of the run's current step: every toolset's, as
// the capabilities prepare them.
func (i *RunInfo) Tools(ctx context.Context) ([]*tool.Tool, error) { return i.r.tools(ctx) }

// RunContext returns a new RunContext of the run, with no call's fields
// set (the caller sets them for the call it makes).
func (i *RunInfo) RunContext() *tool.RunContext { return i.r.runContext(nil) }

// CallTool runs call through the capabilities' ToolCallWrappers to its
// tool, as the loop runs a call.
func (i *RunInfo) CallTool(ctx context.Context, call *ToolCall) (any, error) {
	return i.r.chain()(ctx, call)
}
