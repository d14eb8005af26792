package agent

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"

	"github.com/offload-dev/offload/pkg/deferred"
	"github.com/offload-dev/offload/pkg/message"
	"github.com/offload-dev/offload/pkg/progress"
	"github.com/offload-dev/offload/pkg/tool"
)

// runContext returns the RunContext of a call (of the step, when s is nil).
func (r *run) runContext(s *slot) *tool.RunContext {
	rc := &tool.RunContext{
		RunID:          r.runID,
		ConversationID: r.convID,
		Tenant:         r.opts.Tenant,
		Agent:          r.opts.Agent,
		Usage:          r.state.usageSnapshot(),
		Deps:           r.opts.Deps,
		Control:        r,
	}
	if s != nil {
		rc.ToolCallID, rc.ToolName = s.call.ToolCallID, s.call.ToolName
		rc.ToolCallApproved = s.approved
		rc.ToolCallMetadata = s.metadata
		rc.TaskID, rc.Attempt = cmp.Or(s.deferredTaskID, s.dispatchID, s.stepTask), s.attempt
		rc.Again = s.again
		if s.stepTask != "" {
			// A recorded step (SPEC §20): the key an in-process tool runs
			// with, the same when a continuation runs it again.
			rc.IdempotencyKey = idempotencyKey(rc.TaskID, rc.Attempt)
		}
		if s.t != nil {
			rc.MaxRetries = s.t.Retries
		}
		rc.Retry = r.state.retry(s.call.ToolName)
	}
	return rc
}

// executeAll runs the slots' tools: concurrently, except that a sequential
// tool runs alone. The first fatal error cancels the others.
func (r *run) executeAll(ctx context.Context, st *stepState, slots []*slot) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var batch []*slot
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		var wg sync.WaitGroup
		errs := make([]error, len(batch))
		// Starting a group of tools is a side effect: none starts once the
		// run was cancelled or interrupted.
		if err := r.alive(ctx); err != nil {
			batch = nil
			return err
		}
		if err := r.beginBatch(ctx, st, batch); err != nil {
			batch = nil
			return err
		}
		if len(batch) == 1 {
			// A lone call runs on the loop's goroutine: no goroutine to
			// start (and wake a thread for), no fresh stack to grow.
			s := batch[0]
			s.ran = s.held == nil
			batch = nil
			return r.runCall(ctx, st, s)
		}
		for i, s := range batch {
			s.ran = s.held == nil
			wg.Go(func() {
				if err := r.runCall(ctx, st, s); err != nil {
					errs[i] = err
					cancel(err)
				}
			})
		}
		wg.Wait()
		batch = nil
		return firstError(errs)
	}
	for _, s := range slots {
		if s.t != nil && s.t.Sequential {
			if err := flush(); err != nil {
				return err
			}
			batch = []*slot{s}
			if err := flush(); err != nil {
				return err
			}
			continue
		}
		batch = append(batch, s)
	}
	return flush()
}

// firstError prefers a real failure over the cancellations it caused.
func firstError(errs []error) error {
	var cancelled error
	for _, err := range errs {
		if err == nil {
			continue
		}
		if !errors.Is(err, context.Canceled) {
			return err
		}
		if cancelled == nil {
			cancelled = err
		}
	}
	return cancelled
}

// runCall runs one call (through the ToolCallWrappers) and records its
// outcome. It returns only fatal errors.
func (r *run) runCall(ctx context.Context, st *stepState, s *slot) error {
	var val any
	var err error
	if s.held != nil {
		err, s.held = s.held, nil
	} else {
		if r.opts.OnEvent != nil {
			// Only an observed run turns progress into events; without a
			// reporter, remote calls skip relaying their workers' reports.
			ctx = progress.WithReporter(ctx, callProgress{r: r, s: s})
		}
		call := &ToolCall{Tool: s.t, Call: s.call, Args: s.args, RunContext: r.runContext(s), TaskID: s.taskID}
		next := r.chain()
		tctx, span := r.startToolSpan(ctx, s)
		val, err = protect(func() (any, error) { return next(tctx, call) })
		endToolSpan(span, err)
		var ho *Handoff
		if errors.As(err, &ho) {
			// The run is suspending and the call goes on elsewhere: it
			// becomes one of the run's background tasks.
			val, err = r.handOff(ctx, s, call, ho)
		}
	}
	if err := r.outcome(ctx, st, s, val, err); err != nil {
		return err
	}
	if s.part != nil {
		r.emitResult(s)
	}
	return r.callEnded(ctx, st, s)
}

// chain is a call through the capabilities' ToolCallWrappers to its tool.
func (r *run) chain() ToolCallFunc {
	next := func(ctx context.Context, c *ToolCall) (any, error) {
		return c.Tool.Run(ctx, c.RunContext, c.Args)
	}
	for i := len(r.caps) - 1; i >= 0; i-- {
		if w, ok := r.caps[i].(ToolCallWrapper); ok {
			inner := next
			next = func(ctx context.Context, c *ToolCall) (any, error) { return w.WrapToolCall(ctx, c, inner) }
		}
	}
	return next
}

// outcome interprets what a tool returned.
func (r *run) outcome(ctx context.Context, st *stepState, s *slot, val any, err error) error {
	name, id := s.call.ToolName, s.call.ToolCallID
	if err == nil {
		part, content, merr := ReturnPart(name, id, val)
		if merr != nil {
			return r.unexpected(s, merr)
		}
		s.part, s.content = part, content
		r.state.addToolCalls(1)
		st.succeeded(name)
		return nil
	}
	// Declared past the common case: errors.As moves them to the heap.
	var retry *tool.ModelRetry
	var failed *tool.ToolFailed
	var ar *tool.ApprovalRequired
	var cd *tool.CallDeferred
	var inval *tool.ValidationError
	var fatal *tool.FatalError
	switch {
	case errors.As(err, &ar):
		s.deferKind, s.deferMeta, s.hasMeta, s.deferTask = deferred.KindApproval, tool.DeepCopy(ar.Metadata), ar.Metadata != nil, ar.TaskID
	case errors.As(err, &cd):
		s.deferKind, s.deferMeta, s.hasMeta, s.deferTask = deferred.KindExternal, tool.DeepCopy(cd.Metadata), cd.Metadata != nil, cd.TaskID
	case errors.As(err, &retry):
		if e := r.state.consumeRetry(st, name, s.t.Retries); e != nil {
			return e
		}
		s.part = message.RetryPrompt{ToolName: name, ToolCallID: id, Content: retry.Message}
	case errors.As(err, &inval):
		if e := r.state.consumeRetry(st, name, s.t.Retries); e != nil {
			return e
		}
		s.part = message.RetryPrompt{ToolName: name, ToolCallID: id, Content: validationText(inval)}
	case errors.As(err, &failed):
		s.part = message.ToolReturn{ToolName: name, ToolCallID: id, Content: jsonString(failed.Message), Outcome: message.OutcomeFailed}
	case errors.Is(err, ErrRunCancelled), ctx.Err() != nil && (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)):
		// The run was cancelled, interrupted or ran out of time while the
		// call ran: the call is cancelled, not failed.
		return err
	case errors.As(err, &fatal):
		return fmt.Errorf("tool %s: %w", name, err)
	default:
		return r.unexpected(s, err)
	}
	return nil
}

// unexpected handles an error that is not a tool outcome: logged with its
// message; the model sees only the error's type. With FailOnToolError it
// ends the run.
func (r *run) unexpected(s *slot, err error) error {
	typ := tool.ErrorType(err)
	r.logger().Error("tool failed", append([]any{slog.String("tool", s.call.ToolName), slog.String("tool_call_id", s.call.ToolCallID), slog.String("error_type", typ), slog.Any("error", err)}, panicStack(err)...)...)
	if r.a.cfg.FailOnToolError {
		return fmt.Errorf("tool %s: %w", s.call.ToolName, err)
	}
	s.part = message.ToolReturn{ToolName: s.call.ToolName, ToolCallID: s.call.ToolCallID, Content: jsonString(typ), Outcome: message.OutcomeFailed}
	return nil
}

// ReturnPart turns a tool's return value (a JSON-encodable value, a
// json.RawMessage, or a tool.Return) into the result part of call id of
// the named tool, and the extra user content of a tool.Return, as the loop
// records a call's result.
func ReturnPart(name, id string, val any) (message.ToolReturn, []message.Content, error) {
	var content []message.Content
	var md map[string]any
	switch x := val.(type) {
	case tool.Return:
		val, content, md = x.Value, x.Content, x.Metadata
	case *tool.Return:
		if x == nil {
			val = nil
			break
		}
		val, content, md = x.Value, x.Content, x.Metadata
	}
	switch val.(type) {
	case tool.Return, *tool.Return:
		// Encoded as a value, the inner one would show the model its
		// application-only metadata (the reference refuses it too).
		return message.ToolReturn{}, nil, &UserError{Message: "a tool.Return's Value is itself a tool.Return: return one tool.Return, merging their Content and Metadata"}
	}
	var raw json.RawMessage
	if s, ok := val.(string); ok {
		raw = jsonString(s)
	} else if r, ok := val.(json.RawMessage); ok {
		if len(r) == 0 {
			r = json.RawMessage("null")
		}
		if !json.Valid(r) {
			return message.ToolReturn{}, nil, errors.New("return value is not valid JSON")
		}
		raw = r
	} else {
		// The value's own MarshalJSON is the tool's code: a panic in it is
		// the tool's panic, which the process survives.
		b, err := protect(func() (any, error) { return json.Marshal(val) })
		if err != nil {
			return message.ToolReturn{}, nil, fmt.Errorf("marshal return value: %w", err)
		}
		raw = b.([]byte)
	}
	return message.ToolReturn{ToolName: name, ToolCallID: id, Content: raw, Outcome: message.OutcomeSuccess, Metadata: tool.DeepCopy(md)}, slices.Clone(content), nil
}

func (r *run) emitCall(s *slot, valid *bool) {
	if s.callEmitted {
		return
	}
	s.callEmitted = true
	e := Event{Type: EventToolCall, ToolCallID: s.call.ToolCallID, Tool: s.call.ToolName, Args: json.RawMessage(s.rawArgs()), ArgsValid: valid}
	if valid != nil && *valid {
		e.TaskID = s.taskID
		if e.TaskID == "" {
			e.TaskID = s.dispatchID
		}
	}
	r.emit(e)
}

func (r *run) emitResult(s *slot) {
	e := Event{Type: EventToolResult, ToolCallID: s.call.ToolCallID, Tool: s.call.ToolName}
	switch p := s.part.(type) {
	case message.ToolReturn:
		e.Outcome, e.Content = string(p.Outcome), p.Content
	case message.RetryPrompt:
		e.Outcome, e.Content = "retry", jsonString(p.Content)
	}
	r.emit(e)
}

// callProgress turns a running call's progress reports (its own, or relayed
// from the worker running it) into progress events.
type callProgress struct {
	r *run
	s *slot
}

func (p callProgress) Report(message string, fraction *float64) { p.ReportTask("", message, fraction) }

func (p callProgress) ReportTask(taskID, message string, fraction *float64) {
	p.r.emit(Event{Type: EventProgress, TaskID: taskID, ToolCallID: p.s.call.ToolCallID, Tool: p.s.call.ToolName, Message: message, Fraction: fraction})
}

// ReportQueued turns a remote call held in its tool's queue into a queued
// event (progress.QueueReporter).
func (p callProgress) ReportQueued(taskID, message string, q progress.Queued) {
	p.r.emit(Event{Type: EventQueued, TaskID: taskID, ToolCallID: p.s.call.ToolCallID, Tool: p.s.call.ToolName, Message: message, Queued: &q})
}
