package protocol

import (
	"encoding/json"
	"strconv"
	"time"

	"github.com/offload-dev/offload/pkg/limits"
	"github.com/offload-dev/offload/pkg/message"
)

// Mode says how the agent awaits a remote tool call.
type Mode string

// Task modes. The empty mode means [ModeInline].
const (
	// ModeInline: the agent awaits the result within the run.
	ModeInline Mode = "inline"
	// ModeBackground: the run continues; the result is injected later.
	ModeBackground Mode = "background"
	// ModeExternal: an external deferred call (answered by a result message).
	ModeExternal Mode = "external"
)

// Valid reports whether m is one of the defined modes.
func (m Mode) Valid() bool {
	switch m {
	case ModeInline, ModeBackground, ModeExternal:
		return true
	}
	return false
}

// Status says how a tool call ended.
type Status string

// Result statuses. The empty status means [StatusOK].
const (
	// StatusOK: the tool returned a value (content).
	StatusOK Status = "ok"
	// StatusRetry: the model should call the tool again (message says why).
	StatusRetry Status = "retry"
	// StatusFailed: a terminal failure the model sees (message).
	StatusFailed Status = "failed"
	// StatusError: an unexpected error; the model sees only error_type.
	StatusError Status = "error"
	// StatusCancelled: the call was cancelled on request (terminal).
	StatusCancelled Status = "cancelled"
	// StatusApprovalRequired: the tool asked for a person's approval.
	StatusApprovalRequired Status = "approval_required"
	// StatusCallDeferred: the tool deferred the call to external execution.
	StatusCallDeferred Status = "call_deferred"
)

// Valid reports whether s is one of the defined statuses.
func (s Status) Valid() bool {
	switch s {
	case StatusOK, StatusRetry, StatusFailed, StatusError, StatusCancelled,
		StatusApprovalRequired, StatusCallDeferred:
		return true
	}
	return false
}

// Error types carried by a result of status error besides Go type names.
const (
	// ErrorPanic: the tool panicked.
	ErrorPanic = "Panic"
	// ErrorCommandFailed: an external command exited unsuccessfully.
	ErrorCommandFailed = "CommandFailed"
	// ErrorDeliveriesExhausted: the task was delivered the maximum number of
	// times without a result.
	ErrorDeliveriesExhausted = "DeliveriesExhausted"
	// ErrorDeadlineExceeded: the task's deadline passed.
	ErrorDeadlineExceeded = "DeadlineExceeded"
	// ErrorResultTooLarge: the result did not fit in a message.
	ErrorResultTooLarge = "ResultTooLarge"
	// ErrorInvalidArguments: the arguments failed the tool's schema.
	ErrorInvalidArguments = "InvalidArguments"
	// ErrorUnauthenticatedTask: an approved task without a valid
	// [TaskMACHeader] reached a worker that requires one (the in-process
	// worker of the embedded default): it was not dispatched by an agent
	// of the store, and was not run.
	ErrorUnauthenticatedTask = "UnauthenticatedTask"
	// ErrorRateLimited: the service behind the tool refused the call for
	// now (Result.RetryAfter says for how long; SPEC §19).
	ErrorRateLimited = "RateLimited"
)

// Task asks the workers serving Tool to run it. It is published on
// <prefix>.task.<tool> with header Nats-Msg-Id set to [TaskMsgID]: TaskID,
// or "<task_id>:<attempt>" for a later attempt.
type Task struct {
	// TaskID identifies the task (ULID). Required.
	TaskID string `json:"task_id"`
	// Tool is the tool's name. Required.
	Tool string `json:"tool"`
	// Args is the call's arguments, a JSON object. Required.
	Args json.RawMessage `json:"args"`
	// ConversationID is the conversation the call belongs to (ULID). Required.
	ConversationID string `json:"conversation_id"`
	// ToolCallID is the model's ID of the call.
	ToolCallID string `json:"tool_call_id,omitempty"`
	// RunID is the agent run that made the call.
	RunID string `json:"run_id,omitempty"`
	// Mode is how the agent awaits the result. Defaults to [ModeInline].
	Mode Mode `json:"mode,omitempty"`
	// Metadata is application-only data about the call.
	Metadata map[string]any `json:"metadata,omitempty"`
	// Approved is true when a person approved the call.
	Approved bool `json:"approved,omitempty"`
	// ToolCallMetadata is the metadata supplied with the approval.
	ToolCallMetadata map[string]any `json:"tool_call_metadata,omitempty"`
	// Retry is how many retries of this tool the run has used so far.
	Retry int `json:"retry,omitempty"`
	// Attempt counts dispatches of the same task: 0 for the first; a call
	// dispatched again (after an approval or a retry) keeps its task ID and
	// takes the next attempt, and its Nats-Msg-Id is "<task_id>:<attempt>".
	Attempt int `json:"attempt,omitempty"`
	// Deadline, when set, is the time after which the call is pointless.
	Deadline time.Time `json:"deadline,omitzero"`
	// CreatedAt is when the task was made. Defaults to the time received.
	CreatedAt time.Time `json:"created_at,omitzero"`
	// Traceparent is the W3C trace context of the call.
	Traceparent string `json:"traceparent,omitempty"`
	// Tenant is the tenant of the call's conversation (SPEC §19), also in
	// the header [TenantHeader]; empty when it has none.
	Tenant string `json:"tenant,omitempty"`
	// Agent is the name of the agent that made the call, when it has one
	// (agent serve's agents, a spec's name).
	Agent string `json:"agent,omitempty"`
	// Limits are the agent's own limits for the call (its spec's tool
	// policy, SPEC §19): a worker holds the call to them and to its own,
	// the stricter winning; they never loosen the worker's.
	Limits *limits.Limits `json:"limits,omitempty"`
}

// TenantHeader carries a task's tenant beside its payload, so that what
// routes or counts tasks by tenant need not decode them.
const TenantHeader = "Offload-Tenant"

// Result answers a task. A worker publishes it on
// <prefix>.result.<conv>.<task>.<tool>; a person or a UI answers an external
// call with the same payload on <prefix>.answer.<conv>.<task>.
type Result struct {
	// TaskID is the task answered. Defaults to the subject's task ID.
	TaskID string `json:"task_id"`
	// ToolCallID is the model's ID of the call.
	ToolCallID string `json:"tool_call_id,omitempty"`
	// Status says how the call ended. Defaults to [StatusOK].
	Status Status `json:"status"`
	// Content is the tool's return value (any JSON) for [StatusOK].
	Content json.RawMessage `json:"content,omitempty"`
	// UserContent is extra content for the model (text or files).
	UserContent []message.Content `json:"user_content,omitempty"`
	// Message explains a retry or a failure to the model.
	Message string `json:"message,omitempty"`
	// ErrorType names the error of [StatusError]: a Go type name or one of
	// the ErrorXxx constants.
	ErrorType string `json:"error_type,omitempty"`
	// Metadata is application-only data (for approval_required and
	// call_deferred: the metadata passed to whoever decides or executes).
	Metadata map[string]any `json:"metadata,omitempty"`
	// Worker identifies the worker that ran the task.
	Worker string `json:"worker,omitempty"`
	// StartedAt is when the tool started.
	StartedAt time.Time `json:"started_at,omitzero"`
	// FinishedAt is when the tool finished.
	FinishedAt time.Time `json:"finished_at,omitzero"`
	// Attempt is the attempt of the task this result ends (0 for the
	// first dispatch); the result's Nats-Msg-Id is
	// "res:<task_id>:<attempt>", so that a later attempt's result is not
	// dropped as a duplicate of an earlier one.
	Attempt int `json:"attempt,omitempty"`
	// RetryAfter, with status error and error_type [ErrorRateLimited], is
	// how many seconds the service behind the tool asked to wait (SPEC
	// §19). A worker of this module holds the tool's calls that long and
	// runs the call again itself; it publishes such a result only when
	// the call's deliveries are exhausted.
	RetryAfter float64 `json:"retry_after,omitempty"`
	// By and Channel are an answer's only (SPEC §21): who gave it and how
	// (one of the ChannelXxx), as its publisher claims them. The
	// service's faces set them to the person they authenticated and sign
	// the answer; the run records them only when the signature is valid
	// (an answer published raw is shown unattributed). A worker's result
	// and a raw publisher leave them empty.
	By      string `json:"by,omitempty"`
	Channel string `json:"channel,omitempty"`
}

// Approval announces a call waiting for a person's decision. It is published
// by the agent on <prefix>.approval.<conv>.<task>.
type Approval struct {
	// TaskID identifies the pending call (ULID). Required.
	TaskID string `json:"task_id"`
	// ToolCallID is the model's ID of the call.
	ToolCallID string `json:"tool_call_id,omitempty"`
	// Tool is the tool's name. Required.
	Tool string `json:"tool"`
	// Args is the call's arguments, a JSON object. Required.
	Args json.RawMessage `json:"args"`
	// Metadata is DeferredToolRequests.Metadata[tool_call_id].
	Metadata map[string]any `json:"metadata,omitempty"`
	// ConversationID is the conversation (ULID). Required.
	ConversationID string `json:"conversation_id"`
	// RunID is the agent run that made the call.
	RunID string `json:"run_id,omitempty"`
	// RequestedAt is when approval was requested. Defaults to the time received.
	RequestedAt time.Time `json:"requested_at,omitzero"`
	// ArgsDigest is the [ArgsDigest] of Args (SPEC §12): a decision that
	// carries it is admitted only for the call with these arguments.
	ArgsDigest string `json:"args_digest,omitempty"`
}

// Decision is a person's answer to an [Approval], published on
// <prefix>.decision.<conv>.<task>.
type Decision struct {
	// Approved says whether the call may run. Required in the JSON.
	Approved bool `json:"approved"`
	// OverrideArgs, only when approved, replaces the call's arguments (a JSON
	// object).
	OverrideArgs json.RawMessage `json:"override_args,omitempty"`
	// Message, only when denied, tells the model why.
	Message string `json:"message,omitempty"`
	// Metadata becomes the tool's RunContext.ToolCallMetadata.
	Metadata map[string]any `json:"metadata,omitempty"`
	// By names who decided (recorded for audit).
	By string `json:"by,omitempty"`
	// ArgsDigest, when set, binds the decision to the call's arguments
	// as they were shown to whoever decided (the [ArgsDigest] of the
	// announcement's args): a decision whose digest does not match the
	// call as it is pending is refused (stale, SPEC §12).
	ArgsDigest string `json:"args_digest,omitempty"`
	// Reason is ReasonExpired for the decision written when no one decided
	// in time (SPEC §12, with By "timeout"): the model is told the call
	// was not approved in time, never that a person denied it.
	Reason string `json:"reason,omitempty"`
	// OnTimeout, in a timeout's decision, is the approval's on_timeout
	// ("deny", "approve" or "fail").
	OnTimeout string `json:"on_timeout,omitempty"`
	// Channel says how the decision was given, as its publisher claims
	// it (like By): one of the ChannelXxx; empty for a raw publish
	// (recorded as [ChannelNATS]).
	Channel string `json:"channel,omitempty"`
}

// The channels of a [Decision] (SPEC §12: recorded in the history
// metadata with who decided and when).
const (
	ChannelInbox = "inbox"
	ChannelAPI   = "api"
	ChannelLink  = "link"
	ChannelCLI   = "cli"
	ChannelNATS  = "nats"
	// ChannelAGUI is the AG-UI face's (SPEC §18): a resume entry of a
	// RunAgentInput.
	ChannelAGUI = "agui"
	// ChannelA2A is the A2A face's (SPEC §17): a data part of a message
	// to an A2A task waiting for input.
	ChannelA2A = "a2a"
	// ChannelMCP is the MCP face's (SPEC §17): an elicitation's answer.
	ChannelMCP = "mcp"
)

// validChannel reports whether c is empty or one of the ChannelXxx.
func validChannel(c string) bool {
	switch c {
	case "", ChannelInbox, ChannelAPI, ChannelLink, ChannelCLI, ChannelNATS, ChannelAGUI, ChannelA2A, ChannelMCP:
		return true
	}
	return false
}

// ReasonExpired is the Reason of an expiry's decision.
const ReasonExpired = "expired"

// TimeoutDecider is the By of an expiry's decision (SPEC §12).
const TimeoutDecider = "timeout"

// OnTimeoutFail is the OnTimeout of an expiry's decision that ends the run
// reading it with an error naming the call (SPEC §12), the model not told.
const OnTimeoutFail = "fail"

// Resolution is published on the subject of an approval announcement
// (<prefix>.approval.<conv>.<task>) once the call is decided, answered or
// withdrawn, so that UIs stop showing it.
type Resolution struct {
	// TaskID is the resolved call's task.
	TaskID string `json:"task_id"`
	// Resolved is approved, denied or cancelled.
	Resolved string `json:"resolved"`
	// At is when it was resolved.
	At time.Time `json:"at"`
	// By names who decided, as the decision claimed it.
	By string `json:"by,omitempty"`
}

// Resolutions of an approval.
const (
	ResolvedApproved  = "approved"
	ResolvedDenied    = "denied"
	ResolvedCancelled = "cancelled"
)

// Cancel asks the worker running a task to stop it, published on
// <prefix>.cancel.<conv>.<task>.<tool>.
type Cancel struct {
	// TaskID is the task to cancel. Defaults to the subject's task ID.
	TaskID string `json:"task_id"`
	// Reason says why.
	Reason string `json:"reason,omitempty"`
}

// Progress reports how a running task is doing, published on
// <prefix>.progress.<conv>.<task>.<tool> (core NATS). It is never shown to
// the model.
type Progress struct {
	// TaskID is the task concerned. Defaults to the subject's task ID.
	TaskID string `json:"task_id"`
	// Message describes the progress.
	Message string `json:"message,omitempty"`
	// Fraction is the part done, in [0, 1]; nil when unknown.
	Fraction *float64 `json:"fraction"`
	// At is when the progress was reported. Defaults to the time received.
	At time.Time `json:"at,omitzero"`
	// Queued, when set, says the call waits in its tool's queue, held by a
	// limit (SPEC §19); Message says it in words ("queued: rate limit of
	// tool T, 3 ahead").
	Queued *Queued `json:"queued,omitempty"`
}

// Queued is why and behind how many a call waits in its tool's queue.
type Queued struct {
	// Reason is max_in_flight, rate, cool_down, paused or order (calls
	// that go first wait).
	Reason string `json:"reason"`
	// Ahead is how many waiting calls go first.
	Ahead int `json:"ahead"`
	// Key is the limit's key and value it waits for ("tenant=acme"),
	// empty for the tool's own.
	Key string `json:"key,omitempty"`
	// Until, when known, is when it may start at the earliest.
	Until time.Time `json:"until,omitzero"`
}

// Text says q in words for a call of toolName, as its progress report's
// message: "queued: rate limit of tool T, 3 ahead" (SPEC §19).
func (q Queued) Text(toolName string) string {
	var what string
	switch q.Reason {
	case "max_in_flight":
		what = "max_in_flight of tool " + toolName
	case "rate":
		what = "rate limit of tool " + toolName
	case "cool_down":
		what = "cool-down of tool " + toolName
		if !q.Until.IsZero() {
			what += " until " + q.Until.UTC().Format(time.TimeOnly)
		}
	case "paused":
		what = "tool " + toolName + " paused"
		if !q.Until.IsZero() {
			what += " until " + q.Until.UTC().Format(time.RFC3339)
		}
	default:
		what = "turn of tool " + toolName
	}
	if q.Key != "" {
		what += " for " + q.Key
	}
	return "queued: " + what + ", " + strconv.Itoa(q.Ahead) + " ahead"
}
