package tool

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"time"
)

// ModelRetry asks the model to call the tool again. Returned by a tool body or
// an args validator, it consumes one unit of the tool's retry budget.
type ModelRetry struct {
	// Message tells the model what to fix.
	Message string
}

// Error implements error.
func (e *ModelRetry) Error() string { return e.Message }

// Retry returns a *ModelRetry with the given message.
func Retry(msg string) error { return &ModelRetry{Message: msg} }

// ToolFailed is a terminal failure the model sees as a failed tool return.
// It does not consume the retry budget.
type ToolFailed struct { //nolint:revive // exported: the name SPEC.md and the model-facing texts use; renaming it is an API change
	// Message is shown to the model.
	Message string
}

// Error implements error.
func (e *ToolFailed) Error() string { return e.Message }

// Fail returns a *ToolFailed with the given message.
func Fail(msg string) error { return &ToolFailed{Message: msg} }

// ApprovalRequired defers the call until a person approves it. Returned by a
// tool body or its args validator; the tool's RunContext.ToolCallApproved is
// true when it runs again after approval.
type ApprovalRequired struct {
	// Metadata is passed to whoever decides (DeferredToolRequests.Metadata).
	// Nil adds no entry.
	Metadata map[string]any
	// TaskID, when set, is the task ID the deferred call keeps: the ID of
	// the task a worker ran when it asked for approval, so that the call
	// approved later is dispatched again as the next attempt of that task.
	TaskID string
}

// Error implements error.
func (e *ApprovalRequired) Error() string { return "tool call requires approval" }

// CallDeferred defers the call to be executed externally; its result is
// supplied later.
type CallDeferred struct {
	// Metadata is passed to whoever executes the call. Nil adds no entry.
	Metadata map[string]any
	// TaskID, when set, is the task ID the deferred call keeps (see
	// ApprovalRequired.TaskID).
	TaskID string
}

// Error implements error.
func (e *CallDeferred) Error() string { return "tool call deferred for external execution" }

// ErrCancelled matches every cancelled outcome: a worker passes it (or an
// error matching it) as the outcome of a call cancelled on request, and
// [*TaskCancelled] matches it. Its text, the message of a cancelled result
// a worker sends for a task cancelled before it started, is the wire
// protocol's.
var ErrCancelled = errors.New("protocol: tool call cancelled")

// TaskCancelled is the outcome of a call (a background task, a remote
// call) that was cancelled before it finished: an executor returns it
// (possibly wrapped) from its task's Outcome, and a cancelled result of the
// wire protocol turns into it. It matches [ErrCancelled].
type TaskCancelled struct {
	// Reason is the reason given to the cancel.
	Reason string
}

// Error implements error.
func (e *TaskCancelled) Error() string {
	if e.Reason == "" {
		return "background task cancelled"
	}
	return "background task cancelled: " + e.Reason
}

// Is reports whether target is [ErrCancelled].
func (e *TaskCancelled) Is(target error) bool { return target == ErrCancelled }

// RateLimited says the service behind a tool refused the call for now and
// asked to be called again After (an HTTP 429 or 503 with Retry-After, a
// command exiting 75): the worker holds every call of the tool (or of the
// call's key) until then, on every replica, and runs this one again after
// it without counting a retry of the model (SPEC §19). Return it with
// [RetryAfter]; an MCP tool whose server's error carries a retry-after
// returns it too.
type RateLimited struct {
	// After is how long to wait, at most limits.MaxRetryAfter.
	After time.Duration
	// Message says what refused, for logs.
	Message string
}

// RetryAfter returns a *RateLimited asking to be called again after d.
func RetryAfter(d time.Duration) error { return &RateLimited{After: d} }

// Error implements error.
func (e *RateLimited) Error() string {
	msg := "rate limited: retry after " + e.After.String()
	if e.Message != "" {
		msg += ": " + e.Message
	}
	return msg
}

// ErrorType implements the error_type the model sees: RateLimited.
func (e *RateLimited) ErrorType() string { return "RateLimited" }

// FatalError marks a tool's error as one that ends the run (the agent
// returns it) instead of a failed call shown to the model: a failure of the
// infrastructure, such as a lost NATS server, that no retry by the model
// can fix.
type FatalError struct{ Err error }

// Fatal wraps err in a *FatalError.
func Fatal(err error) error { return &FatalError{Err: err} }

// Error implements error.
func (e *FatalError) Error() string { return e.Err.Error() }

// Unwrap returns the wrapped error.
func (e *FatalError) Unwrap() error { return e.Err }

// ErrWorkerFault marks a tool's error as a fault of what runs the tool on
// its worker (an MCP server that died under the call), not an outcome of
// the call: a worker hands the task back without a result, as if it had
// died itself, so that the effect ledger's rules for a worker gone apply
// (SPEC §13: an idempotent tool runs again, another's effect is unknown
// to a person, a recorded Checkpoint is resumed).
var ErrWorkerFault = errors.New("tool: worker fault")

// ValidationError is returned when arguments fail to parse or to match the
// tool's schema. The agent turns it into a retry prompt.
type ValidationError struct {
	// Tool is the tool name.
	Tool string
	// Message describes what is wrong, in terms the model can act on.
	Message string
}

// Error implements error.
func (e *ValidationError) Error() string { return e.Message }

// ErrInvalidName is wrapped by errors about tool names that do not match
// [NamePattern].
var ErrInvalidName = errors.New("tool: invalid name")

// ErrInvalidTool is wrapped by errors about an ill-formed tool definition.
var ErrInvalidTool = errors.New("tool: invalid definition")

// ErrorType returns the name the model sees for an unexpected error: the Go
// type name without package or '*' (e.g. "PathError"). Wrapping done with
// fmt.Errorf is looked through, so fmt.Errorf("open: %w", pathErr) reports
// "PathError"; a plain errors.New reports "errorString". An error with an
// ErrorType() string method (e.g. a remote tool's error) reports its own.
func ErrorType(err error) string {
	for err != nil {
		if typed, ok := err.(interface{ ErrorType() string }); ok {
			return typed.ErrorType()
		}
		t := reflect.TypeOf(err)
		for t.Kind() == reflect.Pointer {
			t = t.Elem()
		}
		if t.PkgPath() == "fmt" && strings.HasPrefix(t.Name(), "wrapError") {
			next := unwrapOne(err)
			if next == nil {
				return t.Name()
			}
			err = next
			continue
		}
		if t.Name() == "" {
			return t.String()
		}
		return t.Name()
	}
	return ""
}

func unwrapOne(err error) error {
	switch u := err.(type) { //nolint:errorlint // this is the unwrapping, one level at a time
	case interface{ Unwrap() error }:
		return u.Unwrap()
	case interface{ Unwrap() []error }:
		if errs := u.Unwrap(); len(errs) > 0 {
			return errs[0]
		}
	}
	return nil
}

func invalid(name, format string, args ...any) error {
	return fmt.Errorf("%w: tool %q: %s", ErrInvalidTool, name, fmt.Sprintf(format, args...))
}
