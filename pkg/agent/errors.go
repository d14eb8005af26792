package agent

import (
	"errors"
	"fmt"
	"strings"

	"github.com/offload-dev/offload/pkg/deferred"
)

// RunCancelled is the error of a run cancelled by RunContext.Cancel. Its
// text is the reference's: "The agent run was cancelled."
type RunCancelled struct{}

// Error implements error.
func (RunCancelled) Error() string { return "The agent run was cancelled." }

// ErrRunCancelled ends a run cancelled by RunContext.Cancel; match it with
// errors.Is.
var ErrRunCancelled error = RunCancelled{}

// ErrDeferredNotAllowed is wrapped by the error returned when deferred calls
// remain unresolved and neither the agent nor the run allows ending with
// DeferredToolRequests.
var ErrDeferredNotAllowed = errors.New("deferred tool calls are not allowed to end the run")

// ErrPendingCalls is wrapped by the error returned when a new prompt is given
// while the history holds unprocessed tool calls.
var ErrPendingCalls = errors.New("the history has unprocessed tool calls")

// ErrInvalidConfig is wrapped by configuration errors returned by New.
var ErrInvalidConfig = errors.New("agent: invalid config")

// usageHint is appended to every UsageLimitExceeded message.
const usageHint = "Consider raising the limit."

// UsageLimitExceeded is returned when a run would exceed a usage limit. No
// part of the offending batch has run.
type UsageLimitExceeded struct {
	// Limit names the limit: "request_limit", "tool_calls_limit",
	// "input_tokens_limit", "output_tokens_limit" or "total_tokens_limit".
	Limit string
	// Max is the limit's value.
	Max int
	// Count is the count that would exceed it.
	Count int
}

// Error implements error with the reference's wording.
func (e *UsageLimitExceeded) Error() string {
	var msg string
	switch e.Limit {
	case "request_limit":
		msg = fmt.Sprintf("The next request would exceed the request_limit of %d", e.Max)
	case "tool_calls_limit":
		msg = fmt.Sprintf("The next tool call(s) would exceed the tool_calls_limit of %d (tool_calls=%d)", e.Max, e.Count)
	default:
		name := strings.TrimSuffix(e.Limit, "_limit")
		msg = fmt.Sprintf("Exceeded the %s of %d (%s=%d)", e.Limit, e.Max, name, e.Count)
	}
	return msg + ". " + usageHint
}

// UnexpectedModelBehavior is returned when the model keeps doing something
// the run cannot accept, e.g. a tool exceeded its retry budget.
type UnexpectedModelBehavior struct {
	Message string
}

// Error implements error.
func (e *UnexpectedModelBehavior) Error() string { return e.Message }

// UserError is returned when the caller's input cannot be used: a bad
// history, deferred results that do not match the pending calls, a new prompt
// on pending calls. Err, when set, is a sentinel callers can match with
// errors.Is (ErrDeferredNotAllowed, ErrPendingCalls).
type UserError struct {
	Message string
	Err     error
}

// Error implements error.
func (e *UserError) Error() string { return e.Message }

// Unwrap returns the sentinel, if any.
func (e *UserError) Unwrap() error { return e.Err }

// approvalError is the run's error for an approval value that
// deferred.NormalizeApproval refused with err: an expiry that ends the run
// (*deferred.ApprovalTimeoutError, SPEC §12) as it is, any other as a
// UserError saying msg.
func approvalError(msg string, err error) error {
	if te, ok := errors.AsType[*deferred.ApprovalTimeoutError](err); ok {
		return te
	}
	return &UserError{Message: msg, Err: err}
}

func userErrorf(sentinel error, format string, args ...any) error {
	return &UserError{Message: fmt.Sprintf(format, args...), Err: sentinel}
}

func retriesExceeded(name string, max int) error {
	return &UnexpectedModelBehavior{Message: fmt.Sprintf("Tool '%s' exceeded max retries count of %d. Consider raising the retry limit (tool.Retries).", name, max)}
}

// Panic is the error of an in-process tool (or args validator) that
// panicked. The model sees only {"error":"Panic"} (outcome failed) and the
// process survives; with Config.FailOnToolError the run ends with it.
type Panic struct {
	// Value is what the tool passed to panic.
	Value any
	// Stack is the panicking goroutine's stack.
	Stack []byte
}

// Error implements error.
func (p *Panic) Error() string { return fmt.Sprintf("panic: %v", p.Value) }
