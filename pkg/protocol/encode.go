package protocol

import (
	"bytes"
	"encoding/json"
	"strconv"
	"time"
)

// This file holds the encoders of the two payloads on every call's path,
// Task and Result. They append the exact bytes json.Marshal produces,
// field by field and without reflection, for the common case: strings of
// plain ASCII, compact raw JSON without characters that encoding/json
// escapes. For anything else (a map, a string to escape, raw JSON to
// compact or refuse) the field, or the whole payload, goes through
// encoding/json, so the output and the errors stay those of json.Marshal.

// EncodeTask returns the JSON of t, the same bytes as json.Marshal(t).
func EncodeTask(t *Task) ([]byte, error) {
	return AppendTask(make([]byte, 0, 512+len(t.Args)), t)
}

// AppendTask appends the JSON of t (the same bytes as json.Marshal(t)) to
// b and returns the extended buffer: a caller can encode into a buffer it
// reuses. On error b is returned unchanged.
func AppendTask(b []byte, t *Task) ([]byte, error) {
	out, ok := appendTask(b, t)
	if ok {
		return out, nil
	}
	data, err := json.Marshal(t)
	if err != nil {
		return b, err
	}
	return append(b, data...), nil
}

// EncodeResult returns the JSON of r, the same bytes as json.Marshal(r).
func EncodeResult(r *Result) ([]byte, error) {
	return AppendResult(make([]byte, 0, 320+len(r.Content)+len(r.Message)), r)
}

// AppendResult appends the JSON of r (the same bytes as json.Marshal(r))
// to b and returns the extended buffer. On error b is returned unchanged.
func AppendResult(b []byte, r *Result) ([]byte, error) {
	out, ok := appendResult(b, r)
	if ok {
		return out, nil
	}
	data, err := json.Marshal(r)
	if err != nil {
		return b, err
	}
	return append(b, data...), nil
}

func appendTask(b []byte, t *Task) ([]byte, bool) {
	var ok bool
	b = append(b, `{"task_id":`...)
	b = appendString(b, t.TaskID)
	b = append(b, `,"tool":`...)
	b = appendString(b, t.Tool)
	b = append(b, `,"args":`...)
	if b, ok = appendRaw(b, t.Args); !ok {
		return nil, false
	}
	b = append(b, `,"conversation_id":`...)
	b = appendString(b, t.ConversationID)
	if t.ToolCallID != "" {
		b = append(b, `,"tool_call_id":`...)
		b = appendString(b, t.ToolCallID)
	}
	if t.RunID != "" {
		b = append(b, `,"run_id":`...)
		b = appendString(b, t.RunID)
	}
	if t.Mode != "" {
		b = append(b, `,"mode":`...)
		b = appendString(b, string(t.Mode))
	}
	if len(t.Metadata) > 0 {
		b = append(b, `,"metadata":`...)
		if b, ok = appendValue(b, t.Metadata); !ok {
			return nil, false
		}
	}
	if t.Approved {
		b = append(b, `,"approved":true`...)
	}
	if len(t.ToolCallMetadata) > 0 {
		b = append(b, `,"tool_call_metadata":`...)
		if b, ok = appendValue(b, t.ToolCallMetadata); !ok {
			return nil, false
		}
	}
	if t.Retry != 0 {
		b = append(b, `,"retry":`...)
		b = strconv.AppendInt(b, int64(t.Retry), 10)
	}
	if t.Attempt != 0 {
		b = append(b, `,"attempt":`...)
		b = strconv.AppendInt(b, int64(t.Attempt), 10)
	}
	if !t.Deadline.IsZero() {
		b = append(b, `,"deadline":`...)
		if b, ok = appendTime(b, t.Deadline); !ok {
			return nil, false
		}
	}
	if !t.CreatedAt.IsZero() {
		b = append(b, `,"created_at":`...)
		if b, ok = appendTime(b, t.CreatedAt); !ok {
			return nil, false
		}
	}
	if t.Traceparent != "" {
		b = append(b, `,"traceparent":`...)
		b = appendString(b, t.Traceparent)
	}
	if t.Tenant != "" {
		b = append(b, `,"tenant":`...)
		b = appendString(b, t.Tenant)
	}
	if t.Agent != "" {
		b = append(b, `,"agent":`...)
		b = appendString(b, t.Agent)
	}
	if t.Limits != nil {
		b = append(b, `,"limits":`...)
		if b, ok = appendValue(b, t.Limits); !ok {
			return nil, false
		}
	}
	return append(b, '}'), true
}

func appendResult(b []byte, r *Result) ([]byte, bool) {
	var ok bool
	b = append(b, `{"task_id":`...)
	b = appendString(b, r.TaskID)
	if r.ToolCallID != "" {
		b = append(b, `,"tool_call_id":`...)
		b = appendString(b, r.ToolCallID)
	}
	b = append(b, `,"status":`...)
	b = appendString(b, string(r.Status))
	if len(r.Content) > 0 {
		b = append(b, `,"content":`...)
		if b, ok = appendRaw(b, r.Content); !ok {
			return nil, false
		}
	}
	if len(r.UserContent) > 0 {
		b = append(b, `,"user_content":`...)
		if b, ok = appendValue(b, r.UserContent); !ok {
			return nil, false
		}
	}
	if r.Message != "" {
		b = append(b, `,"message":`...)
		b = appendString(b, r.Message)
	}
	if r.ErrorType != "" {
		b = append(b, `,"error_type":`...)
		b = appendString(b, r.ErrorType)
	}
	if len(r.Metadata) > 0 {
		b = append(b, `,"metadata":`...)
		if b, ok = appendValue(b, r.Metadata); !ok {
			return nil, false
		}
	}
	if r.Worker != "" {
		b = append(b, `,"worker":`...)
		b = appendString(b, r.Worker)
	}
	if !r.StartedAt.IsZero() {
		b = append(b, `,"started_at":`...)
		if b, ok = appendTime(b, r.StartedAt); !ok {
			return nil, false
		}
	}
	if !r.FinishedAt.IsZero() {
		b = append(b, `,"finished_at":`...)
		if b, ok = appendTime(b, r.FinishedAt); !ok {
			return nil, false
		}
	}
	if r.Attempt != 0 {
		b = append(b, `,"attempt":`...)
		b = strconv.AppendInt(b, int64(r.Attempt), 10)
	}
	if r.RetryAfter != 0 {
		return nil, false // rare: encoding/json writes the float
	}
	return append(b, '}'), true
}

// plainByte marks the ASCII bytes encoding/json writes as they are in a
// string (it escapes controls, '"', '\\', and '<', '>', '&' for HTML).
var plainByte = func() (t [256]bool) {
	for c := 0x20; c < 0x7f; c++ {
		t[c] = true
	}
	t['"'], t['\\'], t['<'], t['>'], t['&'] = false, false, false, false, false
	return t
}()

// appendString appends s as a JSON string, as encoding/json writes it.
func appendString(b []byte, s string) []byte {
	for i := range len(s) {
		if !plainByte[s[i]] {
			q, _ := json.Marshal(s) // a string always encodes
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

// appendRaw appends raw JSON as encoding/json writes a json.RawMessage:
// compacted, with HTML characters escaped. ok is false when encoding/json
// must decide (nil, invalid, or escaping to do).
func appendRaw(b []byte, raw json.RawMessage) ([]byte, bool) {
	if raw == nil {
		return append(b, "null"...), true
	}
	if plainLiteral(raw) { // a tool's usual return value: a plain string
		return append(b, raw...), true
	}
	n := len(b)
	buf := bytes.NewBuffer(b)
	if err := json.Compact(buf, raw); err != nil {
		return nil, false
	}
	b = buf.Bytes()
	for _, c := range b[n:] {
		if c == '<' || c == '>' || c == '&' || c == 0xe2 { // 0xe2: U+2028, U+2029
			return nil, false
		}
	}
	return b, true
}

// plainLiteral reports whether raw is a JSON string literal of plain
// ASCII (see plainByte): valid, compact and with nothing to escape, so
// that encoding/json would write it as it is.
func plainLiteral(raw []byte) bool {
	if len(raw) < 2 || raw[0] != '"' || raw[len(raw)-1] != '"' {
		return false
	}
	for _, c := range raw[1 : len(raw)-1] {
		if !plainByte[c] {
			return false
		}
	}
	return true
}

// appendValue appends v encoded by encoding/json.
func appendValue(b []byte, v any) ([]byte, bool) {
	data, err := json.Marshal(v)
	if err != nil {
		return nil, false
	}
	return append(b, data...), true
}

// appendTime appends t as encoding/json writes a time.Time: RFC 3339
// with nanoseconds, in place for the usual times; Time.MarshalJSON decides
// the others (it refuses years outside 0–9999 and offsets with seconds).
func appendTime(b []byte, t time.Time) ([]byte, bool) {
	if y := t.Year(); y >= 0 && y <= 9999 {
		if _, off := t.Zone(); off%60 == 0 {
			b = append(b, '"')
			b = t.AppendFormat(b, time.RFC3339Nano)
			return append(b, '"'), true
		}
	}
	data, err := t.MarshalJSON()
	if err != nil {
		return nil, false
	}
	return append(b, data...), true
}
