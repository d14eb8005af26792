package protocol

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"

	"github.com/offload-dev/offload/pkg/tool"
)

// RemoteError is the outcome of a [StatusError] result: an unexpected error
// that happened on the worker. Type is the remote error_type (a Go type name
// or one of the ErrorXxx constants) and Message the remote message, if any.
// A worker may also return a *RemoteError to [ResultFromOutcome] to report
// one of the ErrorXxx types (for example [ErrorPanic]).
type RemoteError struct {
	// Type is the error type the model sees.
	Type string
	// Message is the error's text, for logs; never shown to the model.
	Message string
}

// Error implements error.
func (e *RemoteError) Error() string {
	if e.Message == "" {
		return "remote error: " + e.Type
	}
	return "remote error: " + e.Type + ": " + e.Message
}

// ErrorTypePattern is what an error_type from the wire must match to be
// shown to the model (SPEC §9); any other value is shown as
// [ErrorRemoteError].
const ErrorTypePattern = `^[A-Za-z][A-Za-z0-9_]{0,63}$`

// ErrorRemoteError is the error type the model sees for a remote error whose
// error_type is empty or not an identifier.
const ErrorRemoteError = "RemoteError"

var errorTypeRE = regexp.MustCompile(ErrorTypePattern)

// ValidErrorType reports whether s matches [ErrorTypePattern].
func ValidErrorType(s string) bool { return errorTypeRE.MatchString(s) }

// ErrorType returns Type when it matches [ErrorTypePattern], else
// [ErrorRemoteError]: a forged error_type never reaches the model as text.
func (e *RemoteError) ErrorType() string {
	if !ValidErrorType(e.Type) {
		return ErrorRemoteError
	}
	return e.Type
}

// ResultFromOutcome turns what a tool returned into a result (TaskID and the
// other envelope fields are left for the caller to fill):
//
//   - err == nil: ok, with content = value as JSON; a [tool.Return] (or
//     *tool.Return) also gives user_content and metadata. A value that does
//     not marshal gives an error result.
//   - [*tool.ModelRetry]: retry with its message.
//   - [*tool.ValidationError]: retry with its message, error_type
//     InvalidArguments.
//   - [*tool.ToolFailed]: failed with its message.
//   - [*tool.ApprovalRequired], [*tool.CallDeferred]: approval_required,
//     call_deferred with their metadata.
//   - [*tool.TaskCancelled]: cancelled with its reason as message.
//   - [tool.ErrCancelled] (or an error matching it): cancelled.
//   - [*RemoteError]: error with its type and message.
//   - [*tool.RateLimited]: error RateLimited with its retry_after.
//   - context.DeadlineExceeded: error DeadlineExceeded.
//   - any other error: error with error_type = [tool.ErrorType](err).
//
// Wrapped errors are recognised (errors.Is/As).
func ResultFromOutcome(value any, err error) Result {
	if err == nil {
		return okResult(value)
	}
	var (
		retry    *tool.ModelRetry
		invalid  *tool.ValidationError
		failed   *tool.ToolFailed
		approval *tool.ApprovalRequired
		deferred *tool.CallDeferred
		remote   *RemoteError
		tc       *tool.TaskCancelled
		limited  *tool.RateLimited
	)
	switch {
	case errors.As(err, &tc):
		return Result{Status: StatusCancelled, Message: tc.Reason}
	case errors.Is(err, tool.ErrCancelled):
		return Result{Status: StatusCancelled, Message: err.Error()}
	case errors.As(err, &retry):
		return Result{Status: StatusRetry, Message: retry.Message}
	case errors.As(err, &invalid):
		return Result{Status: StatusRetry, Message: invalid.Message, ErrorType: ErrorInvalidArguments}
	case errors.As(err, &failed):
		return Result{Status: StatusFailed, Message: failed.Message}
	case errors.As(err, &approval):
		return Result{Status: StatusApprovalRequired, Metadata: approval.Metadata}
	case errors.As(err, &deferred):
		return Result{Status: StatusCallDeferred, Metadata: deferred.Metadata}
	case errors.As(err, &remote):
		return Result{Status: StatusError, ErrorType: remote.ErrorType(), Message: remote.Message}
	case errors.As(err, &limited):
		return Result{Status: StatusError, ErrorType: ErrorRateLimited, Message: err.Error(), RetryAfter: max(limited.After.Seconds(), 0)}
	case errors.Is(err, context.DeadlineExceeded):
		return Result{Status: StatusError, ErrorType: ErrorDeadlineExceeded, Message: err.Error()}
	default:
		return Result{Status: StatusError, ErrorType: tool.ErrorType(err), Message: err.Error()}
	}
}

func okResult(value any) Result {
	var r Result
	switch v := value.(type) {
	case tool.Return:
		value, r.UserContent, r.Metadata = v.Value, v.Content, v.Metadata
	case *tool.Return:
		if v != nil {
			value, r.UserContent, r.Metadata = v.Value, v.Content, v.Metadata
		} else {
			value = nil
		}
	}
	content, err := json.Marshal(value)
	if err != nil {
		return Result{Status: StatusError, ErrorType: tool.ErrorType(err),
			Message: fmt.Sprintf("marshal tool result: %v", err)}
	}
	r.Status = StatusOK
	r.Content = content
	return r
}

// Outcome turns a result back into what the tool returned, the reverse of
// [ResultFromOutcome]:
//
//   - ok (or empty status): a [tool.Return] whose Value is the raw JSON
//     content (json.RawMessage, "null" when absent), with Content =
//     user_content and Metadata = metadata;
//   - retry: [*tool.ModelRetry]; failed: [*tool.ToolFailed];
//   - approval_required: [*tool.ApprovalRequired]; call_deferred:
//     [*tool.CallDeferred] (both with metadata);
//   - error: [*RemoteError] (its ErrorType is the wire's error_type only
//     when that is an identifier, SPEC §9, else "RemoteError");
//     cancelled: [*tool.TaskCancelled] with the message as its reason
//     (it matches [tool.ErrCancelled]).
//
// An unknown status gives an error wrapping [ErrInvalidField].
func (r Result) Outcome() (any, error) {
	switch r.Status {
	case StatusOK, "":
		content := r.Content
		if len(content) == 0 {
			content = json.RawMessage("null")
		}
		return tool.Return{Value: content, Content: r.UserContent, Metadata: r.Metadata}, nil
	case StatusRetry:
		return nil, &tool.ModelRetry{Message: r.Message}
	case StatusFailed:
		return nil, &tool.ToolFailed{Message: r.Message}
	case StatusApprovalRequired:
		return nil, &tool.ApprovalRequired{Metadata: r.Metadata}
	case StatusCallDeferred:
		return nil, &tool.CallDeferred{Metadata: r.Metadata}
	case StatusError:
		typ := r.ErrorType
		if !ValidErrorType(typ) {
			typ = ErrorRemoteError
		}
		return nil, &RemoteError{Type: typ, Message: r.Message}
	case StatusCancelled:
		return nil, &tool.TaskCancelled{Reason: r.Message}
	default:
		return nil, &DecodeError{Payload: "result", Field: "status", Err: ErrInvalidField,
			Reason: fmt.Sprintf("unknown status %q", r.Status)}
	}
}
