package protocol

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/offload-dev/offload/internal/jsonscan"
	"github.com/offload-dev/offload/pkg/tool"
)

// DefaultMaxSize is the largest payload a decoder accepts unless
// [DecodeOpts.MaxSize] says otherwise: 1 MiB, the default max_payload of
// nats-server.
const DefaultMaxSize = 1 << 20

// MaxContentBytes is the most a tool's result content may take once
// JSON-encoded (SPEC §9 "Encoded sizes"): [DefaultMaxSize] less 16 KiB for
// the result's envelope (IDs, status, worker, times) and headers. A tool
// whose encoded output stays within it produces a result that fits the
// server's default max payload.
const MaxContentBytes = DefaultMaxSize - 16<<10

// Sentinels wrapped by [*DecodeError].
var (
	// ErrTooLarge: the payload exceeds the maximum size.
	ErrTooLarge = errors.New("payload too large")
	// ErrMalformed: the payload is not a JSON object.
	ErrMalformed = errors.New("malformed payload")
	// ErrMissingField: a required field is absent or null.
	ErrMissingField = errors.New("missing field")
	// ErrInvalidField: a field has the wrong type or an invalid value.
	ErrInvalidField = errors.New("invalid field")
)

// DecodeError is returned by every decoder of this package when it refuses a
// payload. It wraps one of [ErrTooLarge], [ErrMalformed], [ErrMissingField]
// or [ErrInvalidField].
type DecodeError struct {
	// Payload names what was decoded: "task", "result", "approval",
	// "decision", "cancel" or "progress".
	Payload string
	// Field is the JSON field at fault; empty for the payload as a whole.
	Field string
	// Reason says what is wrong.
	Reason string
	// Err is the sentinel.
	Err error
}

// Error implements error.
func (e *DecodeError) Error() string {
	if e.Field == "" {
		return fmt.Sprintf("protocol: decode %s: %v: %s", e.Payload, e.Err, e.Reason)
	}
	return fmt.Sprintf("protocol: decode %s: %v %q: %s", e.Payload, e.Err, e.Field, e.Reason)
}

// Unwrap returns the sentinel.
func (e *DecodeError) Unwrap() error { return e.Err }

// DecodeOpts are the knobs of a decoder. A nil *DecodeOpts means defaults.
type DecodeOpts struct {
	// MaxSize is the largest payload accepted, in bytes. Defaults to
	// [DefaultMaxSize]; negative means no limit.
	MaxSize int
	// ReceivedAt is the time the payload was received, used as the default
	// of created_at, requested_at and at. Defaults to time.Now().
	ReceivedAt time.Time
}

func (o *DecodeOpts) maxSize() int {
	if o == nil || o.MaxSize == 0 {
		return DefaultMaxSize
	}
	return o.MaxSize
}

func (o *DecodeOpts) receivedAt() time.Time {
	if o == nil || o.ReceivedAt.IsZero() {
		return time.Now()
	}
	return o.ReceivedAt
}

// fields decodes a JSON object field by field, keeping the first error.
type fields struct {
	payload string
	m       []member // in order; a repeated name's last value counts
	err     *DecodeError
}

// memberPool holds the members' storage for the usual payloads, so that
// decoding a payload does not allocate it.
var memberPool = sync.Pool{New: func() any { return new([20]member) }}

func getMembers() *[20]member { return memberPool.Get().(*[20]member) }

// putMembers drops b's references to a payload and pools it.
func putMembers(b *[20]member) {
	clear(b[:])
	memberPool.Put(b)
}

// parseObject checks data and appends its members to out.
func parseObject(payload string, data []byte, opts *DecodeOpts, out []member) ([]member, error) {
	if max := opts.maxSize(); max >= 0 && len(data) > max {
		return nil, &DecodeError{Payload: payload, Err: ErrTooLarge,
			Reason: fmt.Sprintf("%d bytes exceed the limit of %d", len(data), max)}
	}
	trimmed := bytes.TrimSpace(data)
	if len(trimmed) == 0 || trimmed[0] != '{' {
		return nil, &DecodeError{Payload: payload, Err: ErrMalformed, Reason: "not a JSON object"}
	}
	if !validJSON(trimmed) {
		// The reason encoding/json gives.
		var m map[string]json.RawMessage
		reason := "invalid JSON"
		if err := json.Unmarshal(trimmed, &m); err != nil {
			reason = err.Error()
		}
		return nil, &DecodeError{Payload: payload, Err: ErrMalformed, Reason: reason}
	}
	return splitObject(out, trimmed), nil
}

func (f *fields) fail(name string, sentinel error, format string, args ...any) {
	if f.err == nil {
		f.err = &DecodeError{Payload: f.payload, Field: name, Err: sentinel, Reason: fmt.Sprintf(format, args...)}
	}
}

func (f *fields) result() error {
	if f.err != nil {
		return f.err
	}
	return nil
}

// lookup returns the field's value (the last one when repeated) and
// whether it is present.
func (f *fields) lookup(name string) (json.RawMessage, bool) {
	for i := len(f.m) - 1; i >= 0; i-- {
		if string(f.m[i].name) == name {
			return f.m[i].raw, true
		}
	}
	return nil, false
}

// raw returns the field's value unless it is absent or null.
func (f *fields) raw(name string) (json.RawMessage, bool) {
	v, ok := f.lookup(name)
	if !ok || bytes.Equal(v, []byte("null")) {
		return nil, false
	}
	return v, true
}

func (f *fields) require(name string) bool {
	if _, ok := f.raw(name); !ok {
		f.fail(name, ErrMissingField, "required")
		return false
	}
	return true
}

func (f *fields) value(name, want string, dst any) {
	v, ok := f.raw(name)
	if !ok {
		return
	}
	if err := json.Unmarshal(v, dst); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			f.fail(name, ErrInvalidField, "must be %s, got %s", want, te.Value)
			return
		}
		f.fail(name, ErrInvalidField, "must be %s: %v", want, err)
	}
}

func (f *fields) str(name string, dst *string) {
	if v, ok := f.raw(name); ok {
		if s, plain := plainString(v); plain {
			*dst = s
			return
		}
	}
	f.value(name, "a string", dst)
}

// digest decodes an optional args_digest: 64 lowercase hex digits.
func (f *fields) digest(name string, dst *string) {
	f.str(name, dst)
	if *dst != "" && !ValidDigest(*dst) {
		f.fail(name, ErrInvalidField, "not 64 lowercase hex digits (a SHA-256)")
	}
}

func (f *fields) boolean(name string, dst *bool)        { f.value(name, "a boolean", dst) }
func (f *fields) integer(name string, dst *int)         { f.value(name, "an integer", dst) }
func (f *fields) meta(name string, dst *map[string]any) { f.value(name, "a JSON object", dst) }

func (f *fields) object(name string, dst *json.RawMessage) {
	v, ok := f.raw(name)
	if !ok {
		return
	}
	if v[0] != '{' {
		f.fail(name, ErrInvalidField, "must be a JSON object")
		return
	}
	*dst = compact(v)
}

func (f *fields) anyJSON(name string, dst *json.RawMessage) {
	if v, ok := f.lookup(name); ok {
		*dst = compact(v)
	}
}

func (f *fields) timestamp(name string, dst *time.Time) {
	var s string
	if v, ok := f.raw(name); ok {
		if plain, isPlain := plainString(v); isPlain {
			s = plain
		} else {
			f.value(name, "an RFC 3339 timestamp string", &s)
		}
	}
	if s == "" || f.err != nil {
		return
	}
	var t time.Time
	if err := t.UnmarshalText([]byte(s)); err != nil {
		f.fail(name, ErrInvalidField, "must be an RFC 3339 timestamp: %v", err)
		return
	}
	*dst = t
}

func (f *fields) id(name string, dst *string) {
	f.str(name, dst)
	if f.err != nil {
		return
	}
	if *dst == "" {
		if _, present := f.raw(name); present {
			f.fail(name, ErrMissingField, "must not be empty")
		}
		return
	}
	if _, err := ParseID(*dst); err != nil {
		f.fail(name, ErrInvalidField, "%v", err)
	}
}

// taskID decodes a task_id that defaults to the subject's.
func (f *fields) taskID(subjectTaskID string, dst *string) {
	f.str("task_id", dst)
	if f.err != nil {
		return
	}
	switch {
	case *dst == "" && subjectTaskID == "":
		f.fail("task_id", ErrMissingField, "required (no task ID in the subject)")
		return
	case *dst == "":
		*dst = subjectTaskID
	case subjectTaskID != "" && *dst != subjectTaskID:
		f.fail("task_id", ErrInvalidField, "%q does not match the subject's task %q", *dst, subjectTaskID)
		return
	}
	if _, err := ParseID(*dst); err != nil {
		f.fail("task_id", ErrInvalidField, "%v", err)
	}
}

func (f *fields) toolName(name string, dst *string) {
	f.str(name, dst)
	if f.err != nil {
		return
	}
	if *dst == "" {
		if _, present := f.raw(name); present {
			f.fail(name, ErrMissingField, "must not be empty")
		}
		return
	}
	if err := tool.ValidateName(*dst); err != nil {
		f.fail(name, ErrInvalidField, "%v", err)
	}
}

// compact returns a compact copy of v, valid JSON.
func compact(v json.RawMessage) json.RawMessage {
	if jsonscan.IsCompact(v) {
		return append(json.RawMessage(nil), v...)
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, v); err != nil {
		return append(json.RawMessage(nil), v...)
	}
	return buf.Bytes()
}

// DecodeTask decodes and checks a [Task]: task_id, tool, args (a JSON object)
// and conversation_id are required; mode defaults to inline and created_at to
// the time received. opts may be nil. Errors are [*DecodeError].
func DecodeTask(data []byte, opts *DecodeOpts) (Task, error) {
	buf := getMembers()
	defer putMembers(buf)
	m, err := parseObject("task", data, opts, buf[:0])
	if err != nil {
		return Task{}, err
	}
	f := fields{payload: "task", m: m}
	var t Task
	for _, name := range []string{"task_id", "tool", "args", "conversation_id"} {
		f.require(name)
	}
	f.id("task_id", &t.TaskID)
	f.toolName("tool", &t.Tool)
	f.object("args", &t.Args)
	f.id("conversation_id", &t.ConversationID)
	f.str("tool_call_id", &t.ToolCallID)
	f.str("run_id", &t.RunID)
	var mode string
	f.str("mode", &mode)
	t.Mode = Mode(mode)
	if t.Mode == "" {
		t.Mode = ModeInline
	} else if !t.Mode.Valid() {
		f.fail("mode", ErrInvalidField, "%q is not one of inline, background, external", mode)
	}
	f.meta("metadata", &t.Metadata)
	f.boolean("approved", &t.Approved)
	f.meta("tool_call_metadata", &t.ToolCallMetadata)
	f.integer("retry", &t.Retry)
	if t.Retry < 0 {
		f.fail("retry", ErrInvalidField, "must not be negative")
	}
	f.integer("attempt", &t.Attempt)
	if t.Attempt < 0 {
		f.fail("attempt", ErrInvalidField, "must not be negative")
	}
	f.timestamp("deadline", &t.Deadline)
	f.timestamp("created_at", &t.CreatedAt)
	if t.CreatedAt.IsZero() {
		t.CreatedAt = opts.receivedAt()
	}
	f.str("traceparent", &t.Traceparent)
	f.str("tenant", &t.Tenant)
	f.str("agent", &t.Agent)
	f.value("limits", "a limits object", &t.Limits)
	if err := t.Limits.Validate(); err != nil {
		f.fail("limits", ErrInvalidField, "%v", err)
	}
	if err := f.result(); err != nil {
		return Task{}, err
	}
	return t, nil
}

// DecodeResult decodes and checks a [Result] received on a subject whose task
// ID is subjectTaskID (empty when unknown, which makes task_id required).
// task_id defaults to subjectTaskID and must match it; status defaults to ok.
// opts may be nil. Errors are [*DecodeError].
func DecodeResult(data []byte, subjectTaskID string, opts *DecodeOpts) (Result, error) {
	buf := getMembers()
	defer putMembers(buf)
	m, err := parseObject("result", data, opts, buf[:0])
	if err != nil {
		return Result{}, err
	}
	f := fields{payload: "result", m: m}
	var r Result
	f.taskID(subjectTaskID, &r.TaskID)
	f.str("tool_call_id", &r.ToolCallID)
	var status string
	f.str("status", &status)
	r.Status = Status(status)
	if r.Status == "" {
		r.Status = StatusOK
	} else if !r.Status.Valid() {
		f.fail("status", ErrInvalidField, "%q is not one of ok, retry, failed, error, cancelled, approval_required, call_deferred", status)
	}
	f.anyJSON("content", &r.Content)
	f.value("user_content", "an array of content items", &r.UserContent)
	for i, c := range r.UserContent {
		if c.Type != "text" && c.Type != "file" {
			f.fail(fmt.Sprintf("user_content[%d].type", i), ErrInvalidField, "%q is not one of text, file", c.Type)
		}
	}
	f.str("message", &r.Message)
	f.str("error_type", &r.ErrorType)
	f.meta("metadata", &r.Metadata)
	f.str("worker", &r.Worker)
	f.timestamp("started_at", &r.StartedAt)
	f.timestamp("finished_at", &r.FinishedAt)
	f.integer("attempt", &r.Attempt)
	f.value("retry_after", "a number of seconds", &r.RetryAfter)
	if r.RetryAfter < 0 || r.RetryAfter != r.RetryAfter {
		f.fail("retry_after", ErrInvalidField, "%v is not a number of seconds", r.RetryAfter)
	}
	f.str("by", &r.By)
	f.str("channel", &r.Channel)
	if !validChannel(r.Channel) {
		f.fail("channel", ErrInvalidField, "one of inbox, api, link, cli, nats")
	}
	if err := f.result(); err != nil {
		return Result{}, err
	}
	return r, nil
}

// DecodeApproval decodes and checks an [Approval] announcement: task_id,
// tool, args (a JSON object) and conversation_id are required; requested_at
// defaults to the time received. opts may be nil. Errors are [*DecodeError].
func DecodeApproval(data []byte, opts *DecodeOpts) (Approval, error) {
	buf := getMembers()
	defer putMembers(buf)
	m, err := parseObject("approval", data, opts, buf[:0])
	if err != nil {
		return Approval{}, err
	}
	f := fields{payload: "approval", m: m}
	var a Approval
	for _, name := range []string{"task_id", "tool", "args", "conversation_id"} {
		f.require(name)
	}
	f.id("task_id", &a.TaskID)
	f.str("tool_call_id", &a.ToolCallID)
	f.toolName("tool", &a.Tool)
	f.object("args", &a.Args)
	f.meta("metadata", &a.Metadata)
	f.id("conversation_id", &a.ConversationID)
	f.str("run_id", &a.RunID)
	f.timestamp("requested_at", &a.RequestedAt)
	if a.RequestedAt.IsZero() {
		a.RequestedAt = opts.receivedAt()
	}
	f.digest("args_digest", &a.ArgsDigest)
	if err := f.result(); err != nil {
		return Approval{}, err
	}
	return a, nil
}

// DecodeDecision decodes and checks a [Decision]: approved is a required
// boolean; override_args, when present, must be a JSON object and is allowed
// only when approved; message is kept only when denied. opts may be nil.
// Errors are [*DecodeError].
func DecodeDecision(data []byte, opts *DecodeOpts) (Decision, error) {
	buf := getMembers()
	defer putMembers(buf)
	m, err := parseObject("decision", data, opts, buf[:0])
	if err != nil {
		return Decision{}, err
	}
	f := fields{payload: "decision", m: m}
	var d Decision
	f.require("approved")
	f.boolean("approved", &d.Approved)
	f.object("override_args", &d.OverrideArgs)
	if d.OverrideArgs != nil && !d.Approved {
		f.fail("override_args", ErrInvalidField, "only allowed when approved is true")
	}
	f.str("message", &d.Message)
	if d.Approved {
		d.Message = ""
	}
	f.meta("metadata", &d.Metadata)
	f.str("by", &d.By)
	f.digest("args_digest", &d.ArgsDigest)
	f.str("reason", &d.Reason)
	f.str("on_timeout", &d.OnTimeout)
	f.str("channel", &d.Channel)
	if !validChannel(d.Channel) {
		f.fail("channel", ErrInvalidField, "one of inbox, api, link, cli, nats")
	}
	if err := f.result(); err != nil {
		return Decision{}, err
	}
	return d, nil
}

// DecodeCancel decodes and checks a [Cancel] received on a subject whose task
// ID is subjectTaskID (empty when unknown). task_id defaults to
// subjectTaskID and must match it. opts may be nil. Errors are [*DecodeError].
func DecodeCancel(data []byte, subjectTaskID string, opts *DecodeOpts) (Cancel, error) {
	buf := getMembers()
	defer putMembers(buf)
	m, err := parseObject("cancel", data, opts, buf[:0])
	if err != nil {
		return Cancel{}, err
	}
	f := fields{payload: "cancel", m: m}
	var c Cancel
	f.taskID(subjectTaskID, &c.TaskID)
	f.str("reason", &c.Reason)
	if err := f.result(); err != nil {
		return Cancel{}, err
	}
	return c, nil
}

// DecodeProgress decodes and checks a [Progress] report received on a
// subject whose task ID is subjectTaskID (empty when unknown). task_id
// defaults to subjectTaskID and must match it; fraction is null or in [0, 1];
// at defaults to the time received. opts may be nil. Errors are
// [*DecodeError].
func DecodeProgress(data []byte, subjectTaskID string, opts *DecodeOpts) (Progress, error) {
	buf := getMembers()
	defer putMembers(buf)
	m, err := parseObject("progress", data, opts, buf[:0])
	if err != nil {
		return Progress{}, err
	}
	f := fields{payload: "progress", m: m}
	var p Progress
	f.taskID(subjectTaskID, &p.TaskID)
	f.str("message", &p.Message)
	f.value("fraction", "a number", &p.Fraction)
	if p.Fraction != nil && (*p.Fraction < 0 || *p.Fraction > 1) {
		f.fail("fraction", ErrInvalidField, "%v is not in [0, 1]", *p.Fraction)
	}
	f.timestamp("at", &p.At)
	if p.At.IsZero() {
		p.At = opts.receivedAt()
	}
	f.value("queued", "a queued object", &p.Queued)
	if p.Queued != nil && p.Queued.Ahead < 0 {
		f.fail("queued.ahead", ErrInvalidField, "must not be negative")
	}
	if err := f.result(); err != nil {
		return Progress{}, err
	}
	return p, nil
}
