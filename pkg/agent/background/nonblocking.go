package background

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/offload-dev/offload/pkg/agent"
	"github.com/offload-dev/offload/pkg/deferred"
	"github.com/offload-dev/offload/pkg/message"
	"github.com/offload-dev/offload/pkg/progress"
	"github.com/offload-dev/offload/pkg/tool"
)

// DefaultExpiry is the message of an expired approval that gives none.
const DefaultExpiry = "No decision was made in time."

// NonBlockingSelector chooses the tools whose metadata has
// deferred: "background": the default of [NonBlockingConfig].Tools.
var NonBlockingSelector = SelectMetadata(map[string]any{"deferred": "background"})

// NonBlockingConfig makes approval-gated and external calls non-blocking
// (SPEC §12), as an option of [Tools]: such a call returns an
// acknowledgement at once, holds a tool_calls slot, and its outcome
// reaches the model later as a follow-up message, like a background
// outcome. The other calls of the step run at once; the gated one runs
// (in the background, with the capability's executor) only once approved.
//
// When the model ends its turn and only such calls are pending, a run
// that allows deferred results (Config.AllowDeferred or
// RunOptions.AllowDeferred) pauses, listing them in agent.Result.Background
// (kind approval or external, NonBlocking set); a later run continues
// with their outcomes as [agent.AdoptedTask]s. A run that does not allow it
// waits for the next outcome, as it does for a background task.
type NonBlockingConfig struct {
	// Tools chooses the tools whose calls do not block. The zero value is
	// [NonBlockingSelector] (metadata deferred: "background"); SelectAll
	// makes every approval and external call non-blocking
	// (--approve background).
	Tools Selector
	// Waiter watches for the decisions and answers. Required.
	Waiter DeferredWaiter
}

// NonBlockingCalls returns a capability that makes the calls cfg chooses
// non-blocking and runs no tool in the background by itself, for a run
// whose other capabilities are set already (an agent built from a spec,
// continued by a session): it joins the run's [Tools] capability, whose
// executor runs the approved calls (the in-process one when the run has
// none), and adds no instructions.
func NonBlockingCalls(cfg NonBlockingConfig) agent.Capability {
	none := SelectFunc(func(context.Context, *agent.RunInfo, *tool.Tool) bool { return false })
	b := Tools(Config{Tools: none, NonBlocking: &cfg}).(*capability)
	b.quiet = true
	return b
}

// DeferredWaiter watches for the decision (an approval) or the answer (an
// external call) of a non-blocking deferred call. Session's waiter reads
// them from the conversation's streams; [Decisions] is an in-process one.
type DeferredWaiter interface {
	// Wait starts watching for the outcome of call, announcing it if the
	// waiter announces calls; it does not block. The task is done once
	// the outcome is known; its Outcome is the decision as an approval
	// value (true, false, deferred.ToolApproved, deferred.ToolDenied,
	// [ApprovalExpired], or one of these with metadata as a
	// [DecisionWithMetadata]) or the answer as a call value (any JSON value,
	// tool.Return, *tool.ModelRetry, *tool.ToolFailed). Detach stops the
	// watch and reports whether a later run can still learn the outcome
	// (a durable waiter: true). ctx is as for [Executor.Start].
	Wait(ctx context.Context, info *agent.RunInfo, call deferred.PendingTask) (agent.BackgroundTask, error)
}

// DecisionWithMetadata is a decision that carries metadata for the
// approved call (a §5.2 decision's metadata: its RunContext's
// ToolCallMetadata). Approval is an approval value as
// [DeferredWaiter.Wait] describes it.
type DecisionWithMetadata struct {
	Approval any
	Metadata map[string]any
}

// ApprovalExpired is the decision of an approval that no one decided in
// time (SPEC §12: written with by "timeout", reason "expired"): the model
// is told the call was not approved in time, never that a person denied
// it.
type ApprovalExpired struct {
	// Message is shown to the model; empty means [DefaultExpiry].
	Message string
}

// waiter returns the waiter of the first capability whose non-blocking
// selector chooses t, or nil.
func (br *bgRun) waiter(ctx context.Context, t *tool.Tool) DeferredWaiter {
	if t == nil {
		return nil
	}
	for _, c := range br.caps {
		if c.nb != nil && c.nb.Tools.Matches(ctx, br.info, t) {
			return c.nb.Waiter
		}
	}
	return nil
}

// holdDeferred holds the calls a non-blocking selector chooses: each gets
// its acknowledgement as its result, holds a tool_calls slot, and becomes a
// live task waiting for its outcome.
func (br *bgRun) holdDeferred(ctx context.Context, calls []*agent.DeferredCall) error {
	type hold struct {
		c *agent.DeferredCall
		w DeferredWaiter
	}
	var held []hold
	for _, c := range calls {
		if c.Result != nil {
			continue
		}
		if w := br.waiter(ctx, c.Tool); w != nil {
			held = append(held, hold{c, w})
		}
	}
	if len(held) == 0 {
		return nil
	}
	// Each holds a tool_calls slot while it waits (SPEC §3).
	if err := br.info.CheckToolCalls(len(held)); err != nil {
		return err
	}
	for _, h := range held {
		pt := h.c.Task
		pt.NonBlocking = true
		task, err := h.w.Wait(ctx, br.info, pt)
		if err != nil {
			return fmt.Errorf("agent: wait for the outcome of task %s: %w", pt.TaskID, err)
		}
		br.info.ReserveToolCalls(1)
		t := &bgTask{id: pt.TaskID, attempt: pt.Attempt, call: &agent.ToolCall{Tool: h.c.Tool, Call: h.c.Call, Args: pt.Args, TaskID: pt.TaskID},
			task: task, started: time.Now().UTC(), wait: pt.Kind, meta: pt.Metadata, span: trace.SpanContextFromContext(ctx)}
		if err := br.add(t, false); err != nil {
			return err
		}
		ack, _ := json.Marshal(waitingAck(h.c.Call.ToolName, pt.TaskID, pt.Kind))
		h.c.Result = message.ToolReturn{ToolName: h.c.Call.ToolName, ToolCallID: h.c.Call.ToolCallID, Content: ack}
	}
	return nil
}

// waitingAck is the acknowledgement of a non-blocking call (SPEC §12).
func waitingAck(name, taskID string, kind deferred.Kind) string {
	what := "a person's approval"
	if kind == deferred.KindExternal {
		what = "an answer from outside"
	}
	return "Tool '" + name + "' is waiting for " + what + " as task " + taskID + ". The outcome will arrive later as a follow-up message; continue with other work meanwhile."
}

// decided applies the outcome of a waiting task that arrived (a wait that
// failed is not one: deliver leaves it for its failed follow-up): an
// approved call starts running in the background (it reports true: the
// task stays live); a denial, an expiry or an answer is left for its
// follow-up.
func (br *bgRun) decided(ctx context.Context, t *bgTask) (bool, error) {
	id := t.call.Call.ToolCallID
	if t.wait == deferred.KindExternal {
		br.info.Emit(agent.Event{Type: agent.EventDeferredToolResults, Results: &deferred.Results{Calls: map[string]any{id: t.val}, Approvals: map[string]any{}}})
		if tool.AnswersNextAttempt(t.meta) {
			// The answer is the call's input (an MCP elicitation's): the
			// call runs again as its task's next attempt, with it.
			holder, _ := t.meta[tool.AnswerHolderMetaKey].(string)
			return br.runApproved(ctx, t, deferred.ToolApproved{}, agent.AnswerMetadata(t.val, holder))
		}
		return false, nil
	}
	var meta map[string]any
	if dm, ok := t.val.(DecisionWithMetadata); ok {
		t.val, meta = dm.Approval, tool.DeepCopy(dm.Metadata)
	}
	results := &deferred.Results{Calls: map[string]any{}, Approvals: map[string]any{id: t.val}}
	if meta != nil {
		results.Metadata = map[string]map[string]any{id: meta}
	}
	if exp, ok := t.val.(ApprovalExpired); ok {
		msg := exp.Message
		if msg == "" {
			msg = DefaultExpiry
		}
		// The event says it expired: the live view never shows it as a
		// person's denial.
		results.Approvals[id] = deferred.ToolDenied{Message: msg, Reason: deferred.ReasonExpired}
		br.info.Emit(agent.Event{Type: agent.EventDeferredToolResults, Results: results})
		return false, nil
	}
	n, err := deferred.NormalizeApproval(t.val)
	if err != nil {
		return false, approvalError(fmt.Sprintf("approval for tool call %q: %v", id, err), err)
	}
	br.info.Emit(agent.Event{Type: agent.EventDeferredToolResults, Results: results})
	a, ok := n.(deferred.ToolApproved)
	if !ok {
		t.val = n // a deferred.ToolDenied
		return false, nil
	}
	return br.runApproved(ctx, t, a, meta)
}

// runApproved starts the approved call of t with the executor of its
// tool, as the task's next attempt when a worker had deferred it, with
// the decision's metadata as its ToolCallMetadata.
func (br *bgRun) runApproved(ctx context.Context, t *bgTask, a deferred.ToolApproved, meta map[string]any) (bool, error) {
	tl := t.call.Tool
	if tl == nil {
		// Adopted: this run looks its tool up.
		tools, err := br.info.Tools(ctx)
		if err != nil {
			return false, err
		}
		for _, x := range tools {
			if x.Name == t.call.Call.ToolName {
				tl = x
			}
		}
	}
	if tl == nil {
		t.val, t.err = nil, tool.Fail(fmt.Sprintf("Unknown tool name: '%s'.", t.call.Call.ToolName))
		return false, nil
	}
	args := t.call.Args
	if a.OverrideArgs != nil {
		parsed, err := tl.ParseArgs(string(a.OverrideArgs))
		if err != nil {
			// Override arguments the schema refuses: the call fails, the
			// model is told why in its follow-up.
			t.val, t.err = nil, err
			return false, nil //nolint:nilerr // the error is the call's outcome, not the run's
		}
		args = parsed
	}
	rc := br.info.RunContext()
	rc.ToolCallID, rc.ToolName = t.call.Call.ToolCallID, t.call.Call.ToolName
	rc.ToolCallApproved, rc.MaxRetries = true, tl.Retries
	rc.ToolCallMetadata = meta
	rc.TaskID, rc.Attempt = t.id, t.attempt
	call := &agent.ToolCall{Tool: tl, Call: t.call.Call, Args: args, RunContext: rc, TaskID: t.id}
	tctx := context.WithValue(ctx, inBackgroundKey{}, true)
	var tr *taskReporter
	if rep, ok := progress.FromContext(ctx); ok {
		tr = &taskReporter{inner: rep, taskID: t.id}
		tctx = progress.WithReporter(tctx, tr)
	}
	task, err := br.executor(ctx, tl).Start(tctx, &Call{TaskID: t.id, Attempt: t.attempt, Call: call, Run: br.info.CallTool})
	if err != nil {
		return false, fmt.Errorf("start background task: %w", err)
	}
	br.mu.Lock()
	t.call, t.task, t.progress = call, task, tr
	t.wait, t.finished, t.val, t.err = "", false, nil, nil
	t.started = time.Now().UTC()
	br.mu.Unlock()
	return true, br.add(t, true)
}

// waitFollowUp is the follow-up of a waiting task whose outcome was not
// an approval: a denial, an expiry, or an answer (SPEC §12).
func (br *bgRun) waitFollowUp(t *bgTask) (message.Part, error) {
	name, id := t.call.Call.ToolName, t.id
	if t.err != nil {
		br.info.ReserveToolCalls(-1)
		var tf *tool.ToolFailed
		var inval *tool.ValidationError
		switch {
		case errors.As(t.err, &tf):
			return message.UserText(fmt.Sprintf("Background tool '%s' (task %s) failed: %s", name, id, tf.Message)), nil
		case errors.As(t.err, &inval):
			return message.UserText(fmt.Sprintf("Background tool '%s' (task %s) failed: %s", name, id, "Invalid arguments: "+inval.Error())), nil
		}
		return br.unexpected(t, t.err)
	}
	switch v := t.val.(type) {
	case deferred.ToolDenied:
		br.info.ReserveToolCalls(-1)
		if e, _ := t.meta[tool.EffectMetaKey].(string); e == tool.EffectUnknown {
			return unknownText(t, v.Message), nil // SPEC §13's text
		}
		return message.UserText(fmt.Sprintf("Tool '%s' (task %s) was denied: %s", name, id, v.Text())), nil
	case ApprovalExpired:
		br.info.ReserveToolCalls(-1)
		msg := v.Message
		if msg == "" {
			msg = DefaultExpiry
		}
		return message.UserText(fmt.Sprintf("Tool '%s' (task %s) was not approved in time: %s", name, id, msg)), nil
	case *tool.ModelRetry:
		br.info.ReserveToolCalls(-1)
		return message.UserText(fmt.Sprintf("Background tool '%s' (task %s) failed: %s", name, id, v.Message)), nil
	case *tool.ToolFailed:
		br.info.ReserveToolCalls(-1)
		return message.UserText(fmt.Sprintf("Background tool '%s' (task %s) failed: %s", name, id, v.Message)), nil
	}
	// Answered: the answer is its result, and the call counts once.
	part, content, err := agent.ReturnPart(name, t.call.Call.ToolCallID, t.val)
	if err != nil {
		br.info.ReserveToolCalls(-1)
		return br.unexpected(t, err)
	}
	return completed(name, id, part, content), nil
}

// onlyWaiting reports whether every live task waits for a decision or an
// answer that has not arrived.
func (br *bgRun) onlyWaiting() bool {
	br.mu.Lock()
	defer br.mu.Unlock()
	if len(br.live) == 0 || len(br.arrived) > 0 {
		return false
	}
	for _, t := range br.live {
		if t.wait == "" || t.finished {
			return false
		}
	}
	return true
}

// approvalError is the run's error for an approval value that
// deferred.NormalizeApproval refused with err: an expiry that ends the run
// (*deferred.ApprovalTimeoutError, SPEC §12) as it is, any other as an
// agent.UserError saying msg.
func approvalError(msg string, err error) error {
	if te, ok := errors.AsType[*deferred.ApprovalTimeoutError](err); ok {
		return te
	}
	return &agent.UserError{Message: msg, Err: err}
}
