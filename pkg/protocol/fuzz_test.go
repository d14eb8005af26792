package protocol

import (
	"bytes"
	"encoding/json"
	"errors"
	"testing"
)

// Fuzz targets for every decoder. Each asserts that a refusal is a
// *DecodeError wrapping a sentinel, and that an accepted payload re-encodes
// and decodes again to the same value (the encoding is a fixpoint), besides
// payload-specific invariants. Run one for a bounded time with e.g.
//
//	go test ./pkg/protocol -run '^$' -fuzz '^FuzzDecodeTask$' -fuzztime 30s

var nasty = []string{
	``, `null`, `{}`, `[]`, `"x"`, `0`, `{"`, `{}}`, ` {} `, "\xff", `{"a":1}{"b":2}`,
	`{"task_id":null}`, `{"task_id":""}`, `{"task_id":"` + tTask + `","task_id":"x"}`,
	`{"TASK_ID":"` + tTask + `"}`, `{"args":{"a":` + "\"\xff\xfe\"" + `}}`,
	`{"content":"<&>\u2028"}`, `{"at":"9999-12-31T23:59:59-23:59"}`, `{"fraction":1e-400}`,
	`{"fraction":-0}`, `{"created_at":"2026-01-01T00:00:00.000000000Z"}`,
}

func seed(f *testing.F, valid ...string) {
	for _, s := range valid {
		f.Add([]byte(s))
	}
	for _, s := range nasty {
		f.Add([]byte(s))
	}
}

func checkRefusal(t *testing.T, err error) {
	t.Helper()
	var de *DecodeError
	if !errors.As(err, &de) {
		t.Fatalf("error %T is not *DecodeError: %v", err, err)
	}
	if !errors.Is(err, ErrTooLarge) && !errors.Is(err, ErrMalformed) &&
		!errors.Is(err, ErrMissingField) && !errors.Is(err, ErrInvalidField) {
		t.Fatalf("error wraps no sentinel: %v", err)
	}
}

// fixpoint re-encodes v, decodes it again and checks the second encoding is
// byte-identical to the first.
func fixpoint[T any](t *testing.T, v T, decode func([]byte) (T, error)) {
	t.Helper()
	first, err := json.Marshal(v)
	if err != nil {
		t.Fatalf("re-encode %+v: %v", v, err)
	}
	again, err := decode(first)
	if err != nil {
		t.Fatalf("decode of re-encoded %s: %v", first, err)
	}
	second, err := json.Marshal(again)
	if err != nil {
		t.Fatalf("re-encode again: %v", err)
	}
	if !bytes.Equal(first, second) {
		t.Fatalf("not a fixpoint:\n%s\n%s", first, second)
	}
}

func isObject(raw json.RawMessage) bool {
	var m map[string]json.RawMessage
	return len(raw) > 0 && raw[0] == '{' && json.Unmarshal(raw, &m) == nil
}

func FuzzDecodeTask(f *testing.F) {
	seed(f,
		`{"task_id":"`+tTask+`","tool":"search","args":{"q":"x"},"conversation_id":"`+tConv+`"}`,
		`{"task_id":"`+tTask+`","tool":"s","args":{},"conversation_id":"`+tConv+`","mode":"external","approved":true,"retry":3,`+
			`"metadata":{"n":1e300},"tool_call_metadata":{},"deadline":"2026-01-01T00:00:00+01:00","traceparent":"t"}`,
		`{"task_id":"`+tTask+`","tool":"s","args":[],"conversation_id":"`+tConv+`"}`,
	)
	decode := func(b []byte) (Task, error) { return DecodeTask(b, fixedOpts) }
	f.Fuzz(func(t *testing.T, data []byte) {
		task, err := decode(data)
		if err != nil {
			checkRefusal(t, err)
			return
		}
		if _, err := ParseID(task.TaskID); err != nil {
			t.Fatalf("accepted bad task_id: %v", err)
		}
		if _, err := ParseID(task.ConversationID); err != nil {
			t.Fatalf("accepted bad conversation_id: %v", err)
		}
		if !isObject(task.Args) || !task.Mode.Valid() || task.Retry < 0 || task.CreatedAt.IsZero() {
			t.Fatalf("accepted invalid task %+v", task)
		}
		fixpoint(t, task, decode)
	})
}

func FuzzDecodeResult(f *testing.F) {
	seed(f,
		`{"content":"42"}`,
		`{"task_id":"`+tTask+`","status":"error","error_type":"Panic","message":"boom","worker":"w"}`,
		`{"status":"ok","content":{"a":[1,2.5,null]},"user_content":[{"type":"text","text":"t"},{"type":"file","name":"n","media_type":"m","data_base64":"AA=="}]}`,
		`{"status":"approval_required","metadata":{"k":"v"},"started_at":"2026-01-01T00:00:00Z","finished_at":"2026-01-01T00:00:01.5Z"}`,
		`{"status":"nope"}`, `{"user_content":[{"type":"x"}]}`,
	)
	decode := func(b []byte) (Result, error) { return DecodeResult(b, tTask, fixedOpts) }
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := decode(data)
		if err != nil {
			checkRefusal(t, err)
			return
		}
		if r.TaskID != tTask || !r.Status.Valid() {
			t.Fatalf("accepted invalid result %+v", r)
		}
		fixpoint(t, r, decode)
		// Every accepted result converts to an outcome and back to the same status.
		v, oerr := r.Outcome()
		if back := ResultFromOutcome(v, oerr); back.Status != r.Status {
			t.Fatalf("outcome round trip: %q became %q", r.Status, back.Status)
		}
	})
}

func FuzzDecodeApproval(f *testing.F) {
	seed(f,
		`{"task_id":"`+tTask+`","tool_call_id":"c","tool":"rm","args":{"p":"/"},"metadata":{"x":1},"conversation_id":"`+tConv+`","run_id":"r","requested_at":"2026-01-01T00:00:00Z"}`,
		`{"task_id":"`+tTask+`","tool":"rm","args":"{}","conversation_id":"`+tConv+`"}`,
	)
	decode := func(b []byte) (Approval, error) { return DecodeApproval(b, fixedOpts) }
	f.Fuzz(func(t *testing.T, data []byte) {
		a, err := decode(data)
		if err != nil {
			checkRefusal(t, err)
			return
		}
		if _, err := ParseID(a.TaskID); err != nil || !isObject(a.Args) || a.RequestedAt.IsZero() {
			t.Fatalf("accepted invalid approval %+v", a)
		}
		fixpoint(t, a, decode)
	})
}

func FuzzDecodeDecision(f *testing.F) {
	seed(f,
		`{"approved":true}`, `{"approved":false,"message":"no"}`,
		`{"approved":true,"override_args":{"a":1},"metadata":{"m":true},"by":"alice"}`,
		`{"approved":false,"override_args":{}}`, `{"approved":"true"}`, `{"approved":1}`,
	)
	decode := func(b []byte) (Decision, error) { return DecodeDecision(b, fixedOpts) }
	f.Fuzz(func(t *testing.T, data []byte) {
		d, err := decode(data)
		if err != nil {
			checkRefusal(t, err)
			return
		}
		if d.OverrideArgs != nil && (!d.Approved || !isObject(d.OverrideArgs)) {
			t.Fatalf("accepted override_args %s with approved=%v", d.OverrideArgs, d.Approved)
		}
		if d.Approved && d.Message != "" {
			t.Fatalf("kept a message on an approval: %+v", d)
		}
		fixpoint(t, d, decode)
	})
}

func FuzzDecodeCancel(f *testing.F) {
	seed(f, `{"task_id":"`+tTask+`","reason":"user"}`, `{"reason":"x"}`, `{"task_id":"`+tConv+`"}`)
	decode := func(b []byte) (Cancel, error) { return DecodeCancel(b, tTask, fixedOpts) }
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := decode(data)
		if err != nil {
			checkRefusal(t, err)
			return
		}
		if c.TaskID != tTask {
			t.Fatalf("accepted task %q on subject task %q", c.TaskID, tTask)
		}
		fixpoint(t, c, decode)
	})
}

func FuzzDecodeProgress(f *testing.F) {
	seed(f,
		`{"task_id":"`+tTask+`","message":"half","fraction":0.5,"at":"2026-01-01T00:00:00Z"}`,
		`{"fraction":null}`, `{"fraction":1}`, `{"fraction":1.0000001}`, `{"fraction":"0.5"}`,
	)
	decode := func(b []byte) (Progress, error) { return DecodeProgress(b, tTask, fixedOpts) }
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := decode(data)
		if err != nil {
			checkRefusal(t, err)
			return
		}
		if p.TaskID != tTask || p.At.IsZero() || (p.Fraction != nil && (*p.Fraction < 0 || *p.Fraction > 1)) {
			t.Fatalf("accepted invalid progress %+v", p)
		}
		fixpoint(t, p, decode)
	})
}
