package agent

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/oklog/ulid/v2"

	"github.com/offload-dev/offload/pkg/message"
	"github.com/offload-dev/offload/pkg/tool"
)

// stepState tracks the retry accounting of one step. Its maps are made
// when first written.
type stepState struct {
	mu     sync.Mutex
	failed map[string]bool
	ok     map[string]bool
	// rec is the step's record when the run records its steps (once.go).
	rec *stepRecord
}

// succeeded records that a call of the named tool succeeded in the step.
func (st *stepState) succeeded(name string) {
	st.mu.Lock()
	if st.ok == nil {
		st.ok = map[string]bool{}
	}
	st.ok[name] = true
	st.mu.Unlock()
}

// precheck refuses a batch of n calls that would exceed the tool call limit.
func (r *run) precheck(n int) error {
	if n == 0 || r.limits.ToolCalls == nil {
		return nil
	}
	projected := r.state.usageSnapshot().ToolCalls + n
	if projected > *r.limits.ToolCalls {
		return &UsageLimitExceeded{Limit: "tool_calls_limit", Max: *r.limits.ToolCalls, Count: projected}
	}
	return nil
}

// validate checks a call's arguments (schema, then the args validator) and
// emits its tool_call event. A failure gives the slot a retry part (or a
// failed return); kindDeferred ignores a deferral raised by the validator
// (the call is deferred by its kind anyway).
func (r *run) validate(ctx context.Context, st *stepState, s *slot, names []string, kindDeferred bool) error {
	fail := func(msg string) error {
		max := tool.DefaultRetries
		if s.t != nil {
			max = s.t.Retries
		}
		if err := r.state.consumeRetry(st, s.call.ToolName, max); err != nil {
			r.emitCall(s, boolPtr(false))
			return err
		}
		s.part = message.RetryPrompt{ToolName: s.call.ToolName, ToolCallID: s.call.ToolCallID, Content: msg}
		r.emitCall(s, boolPtr(false))
		r.emitResult(s)
		return nil
	}
	if s.t == nil {
		return fail(unknownToolText(s.call.ToolName, names))
	}
	raw, err := r.prepareCall(ctx, s, kindDeferred)
	var retry *tool.ModelRetry
	switch {
	case errors.As(err, &retry):
		return fail(retry.Message)
	case err != nil:
		r.emitCall(s, boolPtr(false))
		return err
	}
	args, err := s.t.ParseArgs(raw)
	if err != nil {
		return fail(validationText(err))
	}
	s.args = args
	if s.t.Validator != nil {
		_, verr := protect(func() (any, error) { return nil, s.t.Validator(ctx, r.runContext(s), args) })
		var inval *tool.ValidationError
		var ar *tool.ApprovalRequired
		var cd *tool.CallDeferred
		switch {
		case verr == nil:
		case errors.As(verr, &retry):
			return fail(retry.Message)
		case errors.As(verr, &inval):
			return fail(validationText(inval))
		case errors.As(verr, &ar), errors.As(verr, &cd):
			if !kindDeferred && !s.approved {
				s.held = verr
			}
		case ctx.Err() != nil && (errors.Is(verr, context.Canceled) || errors.Is(verr, context.DeadlineExceeded)):
			// Stopped by the run's end, not a failure of the tool: the
			// step ends and the call gets a cancelled return.
			r.emitCall(s, boolPtr(false))
			return verr
		default:
			if err := r.unexpected(s, verr); err != nil {
				r.emitCall(s, boolPtr(false))
				return err
			}
			r.emitCall(s, boolPtr(false))
			r.emitResult(s)
			return nil
		}
	}
	r.emitCall(s, boolPtr(true))
	return nil
}

// prepareCall runs the ToolCallPreparers on a call and returns the
// arguments to validate; the task ID they named is kept in the slot.
func (r *run) prepareCall(ctx context.Context, s *slot, deferred bool) (string, error) {
	pc := &PreparedCall{Tool: s.t, Call: s.call, Args: s.rawArgs(), Deferred: deferred, DeferredTaskID: cmp.Or(s.deferredTaskID, s.stepTask)}
	s.taskID, s.dispatchID = "", ""
	for _, c := range r.caps {
		if p, ok := c.(ToolCallPreparer); ok {
			if err := p.PrepareToolCall(ctx, r.info, pc); err != nil {
				return "", err
			}
		}
	}
	s.taskID, s.dispatchID = pc.TaskID, ""
	if pc.TaskID == "" && (deferred || s.t != nil && s.t.Dispatched) {
		// A call that runs inline as a task, or is deferred before it runs,
		// is named up front, so that its tool_call event shows its task:
		// the one the worker runs, or the one a person answers.
		s.dispatchID = cmp.Or(s.deferredTaskID, s.stepTask)
		if s.dispatchID == "" {
			s.dispatchID = ulid.Make().String()
		}
	}
	return pc.Args, nil
}

func unknownToolText(name string, names []string) string {
	if len(names) == 0 {
		return fmt.Sprintf("Unknown tool name: '%s'. No tools available.", name)
	}
	return fmt.Sprintf("Unknown tool name: '%s'. Available tools: %s", name, strings.Join(names, ", "))
}

func validationText(err error) string {
	return "Invalid arguments: " + err.Error()
}

// consumeRetry records that a call of the named tool failed in the step
// st, or returns the error that ends the run when the tool has no retry
// left.
func (s *runState) consumeRetry(st *stepState, name string, max int) error {
	used := s.retry(name)
	if used >= max {
		return retriesExceeded(name, max)
	}
	st.mu.Lock()
	if st.failed == nil {
		st.failed = map[string]bool{}
	}
	st.failed[name] = true
	st.mu.Unlock()
	return nil
}

// endStep applies the step's retry accounting: a tool that failed in the
// step uses one more retry; a tool that only succeeded starts over.
func (s *runState) endStep(st *stepState) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for name := range st.failed {
		s.retries[name]++
	}
	for name := range st.ok {
		if !st.failed[name] {
			delete(s.retries, name)
		}
	}
}

// consumeLateRetry uses one retry of a tool outside a step: a background
// task's ModelRetry arriving later. Past the budget it fails like a step.
func (s *runState) consumeLateRetry(name string, max int) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.retries[name] >= max {
		return retriesExceeded(name, max)
	}
	s.retries[name]++
	return nil
}
