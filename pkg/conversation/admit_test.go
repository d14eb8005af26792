package conversation_test

import (
	"crypto/rand"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/offload-dev/offload/pkg/conversation"
	"github.com/offload-dev/offload/pkg/deferred"
	"github.com/offload-dev/offload/pkg/protocol"
)

// TestAdmitTaskBeforePayload: a message for a task that is not pending is
// refused as unknown_task (or duplicate, once resolved) whatever its
// payload; malformed is for a pending task's message, wrong_kind for a
// well-formed one of the wrong kind.
func TestAdmitTaskBeforePayload(t *testing.T) {
	t.Parallel()
	const bg, approval, unknown = "01J00000000000000000000002", "01J00000000000000000000001", "01J00000000000000000000009"
	st := &conversation.State{ID: "01J00000000000000000000000", Pending: &deferred.PendingRecord{Tasks: []deferred.PendingTask{
		{TaskID: approval, Kind: deferred.KindApproval, Tool: "shell"},
		{TaskID: bg, Kind: deferred.KindBackground, Tool: "sleep"},
	}}}
	now := time.Now()
	reason := func(kind conversation.ArrivalKind, task, data string) string {
		t.Helper()
		var re *conversation.RefusedError
		if err := st.Admit(kind, task, []byte(data), 0, now, 0); !errors.As(err, &re) {
			if err != nil {
				t.Fatalf("%s %s: %v", kind, data, err)
			}
			return ""
		}
		return re.Reason
	}
	for _, c := range []struct {
		kind       conversation.ArrivalKind
		task, data string
		want       string
	}{
		{conversation.ArrivalResult, unknown, `{not json`, conversation.ReasonUnknownTask},
		{conversation.ArrivalResult, unknown, `{"task_id":"01J00000000000000000000008"}`, conversation.ReasonUnknownTask},
		{conversation.ArrivalDecision, unknown, `{"approved":"yes"}`, conversation.ReasonUnknownTask},
		{conversation.ArrivalResult, bg, `{not json`, conversation.ReasonMalformed},
		{conversation.ArrivalDecision, bg, `{"approved":true}`, conversation.ReasonWrongKind},
		{conversation.ArrivalResult, bg, `{"content":"done"}`, ""},
		{conversation.ArrivalResult, bg, `{"content":"again"}`, conversation.ReasonDuplicate},
		{conversation.ArrivalDecision, approval, `{"approved":"yes"}`, conversation.ReasonMalformed},
	} {
		if got := reason(c.kind, c.task, c.data); got != c.want {
			t.Errorf("%s for %s %s: refused %q, want %q", c.kind, c.task, c.data, got, c.want)
		}
	}
}

// TestAdmitStaleDecision: a decision carrying the args_digest of other
// arguments than the call's as pending is refused (stale); one carrying
// the call's digest, or none, is admitted.
func TestAdmitStaleDecision(t *testing.T) {
	t.Parallel()
	const task = "01J00000000000000000000001"
	args := json.RawMessage(`{"target": "prod", "force": false}`)
	digest, err := protocol.ArgsDigest(args)
	if err != nil {
		t.Fatal(err)
	}
	other, _ := protocol.ArgsDigest(json.RawMessage(`{"target":"staging","force":false}`))
	state := func() *conversation.State {
		return &conversation.State{ID: "01J00000000000000000000000", Pending: &deferred.PendingRecord{Tasks: []deferred.PendingTask{
			{TaskID: task, Kind: deferred.KindApproval, Tool: "deploy", Args: args},
		}}}
	}
	var re *conversation.RefusedError
	if err := state().Admit(conversation.ArrivalDecision, task, []byte(`{"approved":true,"args_digest":"`+other+`"}`), 0, time.Now(), 0); !errors.As(err, &re) || re.Reason != conversation.ReasonStale {
		t.Errorf("a decision for other arguments: %v, want refused stale", err)
	}
	for _, data := range []string{`{"approved":true,"args_digest":"` + digest + `"}`, `{"approved":false}`} {
		st := state()
		if err := st.Admit(conversation.ArrivalDecision, task, []byte(data), 0, time.Now(), 0); err != nil || len(st.Arrivals) != 1 {
			t.Errorf("%s: %v, want admitted", data, err)
		}
	}
}

// TestAdmitTimeoutDecision (issue 37, finding 2): a timeout's decision
// (by "timeout", reason expired, an on_timeout, or written by the
// expiries stream whatever it says) is admitted only as the call's own
// timeout: its policy has one, the content is exactly what it decides,
// stored at or after the deferral plus the timeout. Anything else is
// refused invalid_timeout and the call stays pending; the one admitted
// is verified.
func TestAdmitTimeoutDecision(t *testing.T) {
	t.Parallel()
	deferredAt := time.Now().Add(-time.Hour).Truncate(time.Millisecond)
	task := ulid.MustNew(ulid.Timestamp(deferredAt), rand.Reader).String()
	exp := &deferred.Expiry{After: 30 * time.Minute, OnTimeout: "deny", Message: "nobody came"}
	due := deferredAt.Add(exp.After)
	state := func(e *deferred.Expiry) *conversation.State {
		return &conversation.State{ID: protocol.NewID(), Pending: &deferred.PendingRecord{Tasks: []deferred.PendingTask{
			{TaskID: task, Kind: deferred.KindApproval, Tool: "deploy", Args: json.RawMessage(`{}`), Expiry: e}}}}
	}
	timeout := `{"approved":false,"by":"timeout","reason":"expired","on_timeout":"deny","message":"nobody came"}`
	for _, c := range []struct {
		name   string
		expiry *deferred.Expiry
		data   string
		o      conversation.AdmitOptions
		at     time.Time
		want   string
	}{
		{"the call's timeout, on time", exp, timeout, conversation.AdmitOptions{Expiry: true}, due, ""},
		{"the call's timeout, late", exp, timeout, conversation.AdmitOptions{}, due.Add(time.Hour), ""},
		{"no timeout in the policy", nil, timeout, conversation.AdmitOptions{Expiry: true}, due, conversation.ReasonInvalidTimeout},
		{"early", exp, timeout, conversation.AdmitOptions{Expiry: true}, due.Add(-time.Second), conversation.ReasonInvalidTimeout},
		{"approved where the policy denies", exp, `{"approved":true,"by":"timeout","reason":"expired","on_timeout":"approve"}`,
			conversation.AdmitOptions{Expiry: true}, due, conversation.ReasonInvalidTimeout},
		{"another message", exp, `{"approved":false,"by":"timeout","reason":"expired","on_timeout":"deny","message":"run it anyway"}`,
			conversation.AdmitOptions{}, due, conversation.ReasonInvalidTimeout},
		{"with metadata", exp, `{"approved":false,"by":"timeout","reason":"expired","on_timeout":"deny","message":"nobody came","metadata":{"x":1}}`,
			conversation.AdmitOptions{}, due, conversation.ReasonInvalidTimeout},
		{"a person's approval written by the expiries stream", exp, `{"approved":true,"by":"alice","channel":"inbox"}`,
			conversation.AdmitOptions{Expiry: true}, due, conversation.ReasonInvalidTimeout},
		{"a reason expired by a person", exp, `{"approved":false,"by":"alice","reason":"expired"}`,
			conversation.AdmitOptions{}, due, conversation.ReasonInvalidTimeout},
		{"a person's denial", exp, `{"approved":false,"by":"alice"}`, conversation.AdmitOptions{}, due.Add(-time.Minute), ""},
	} {
		st := state(c.expiry)
		c.o.At = c.at
		err := st.AdmitWith(conversation.ArrivalDecision, task, []byte(c.data), c.o)
		var re *conversation.RefusedError
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: %v", c.name, err)
		case c.want != "" && (!errors.As(err, &re) || re.Reason != c.want):
			t.Errorf("%s: %v, want refused %s", c.name, err, c.want)
		case c.want != "" && st.Arrived(task):
			t.Errorf("%s: refused, yet arrived", c.name)
		case c.want == "" && strings.Contains(c.data, `"timeout"`) && !st.Arrivals[0].Verified:
			t.Errorf("%s: the call's own timeout not verified", c.name)
		}
	}
}

// TestAdmitSignedDecision: a decision's arrival is verified only when its
// signature was (AdmitOptions.Signed).
func TestAdmitSignedDecision(t *testing.T) {
	t.Parallel()
	task := protocol.NewID()
	for _, signed := range []bool{true, false} {
		st := &conversation.State{ID: protocol.NewID(), Pending: &deferred.PendingRecord{Tasks: []deferred.PendingTask{
			{TaskID: task, Kind: deferred.KindApproval, Tool: "deploy", Args: json.RawMessage(`{}`)}}}}
		if err := st.AdmitWith(conversation.ArrivalDecision, task, []byte(`{"approved":true,"by":"alice","channel":"inbox"}`),
			conversation.AdmitOptions{At: time.Now(), Signed: signed}); err != nil {
			t.Fatal(err)
		}
		if st.Arrivals[0].Verified != signed {
			t.Errorf("signed %v: verified %v", signed, st.Arrivals[0].Verified)
		}
	}
}

// An answer signed by the service (SPEC §21) is recorded Verified, as a
// decision is; one unsigned is admitted all the same, unverified; a
// worker's result is never verified, whatever the options say.
func TestAdmitSignedAnswer(t *testing.T) {
	t.Parallel()
	task := protocol.NewID()
	for _, signed := range []bool{true, false} {
		st := &conversation.State{ID: protocol.NewID(), Pending: &deferred.PendingRecord{Tasks: []deferred.PendingTask{
			{TaskID: task, Kind: deferred.KindExternal, Tool: "ask", Args: json.RawMessage(`{}`)}}}}
		if err := st.AdmitWith(conversation.ArrivalAnswer, task, []byte(`{"content":"42","by":"bea","channel":"api"}`),
			conversation.AdmitOptions{At: time.Now(), Signed: signed}); err != nil {
			t.Fatal(err)
		}
		if st.Arrivals[0].Verified != signed {
			t.Errorf("signed %v: verified %v", signed, st.Arrivals[0].Verified)
		}
	}
	st := &conversation.State{ID: protocol.NewID(), Pending: &deferred.PendingRecord{Tasks: []deferred.PendingTask{
		{TaskID: task, Kind: deferred.KindBackground, Tool: "charge"}}}}
	if err := st.AdmitWith(conversation.ArrivalResult, task, []byte(`{"content":"ok"}`), conversation.AdmitOptions{At: time.Now(), Signed: true}); err != nil {
		t.Fatal(err)
	}
	if st.Arrivals[0].Verified {
		t.Error("a worker's result recorded verified")
	}
	st = &conversation.State{ID: protocol.NewID(), Pending: &deferred.PendingRecord{Tasks: []deferred.PendingTask{
		{TaskID: task, Kind: deferred.KindExternal, Tool: "ask"}}}}
	var re *conversation.RefusedError
	if err := st.AdmitWith(conversation.ArrivalAnswer, task, []byte(`{"content":"42","channel":"carrier pigeon"}`), conversation.AdmitOptions{At: time.Now()}); !errors.As(err, &re) || re.Reason != conversation.ReasonMalformed {
		t.Errorf("an answer of an unknown channel: %v, want refused malformed", err)
	}
}

// A background task's result of approval_required is not its last word
// (refused malformed), but for an unknown effect (SPEC §13: its worker
// stopped while running it), which the run that reads it asks a person
// about.
func TestAdmitBackgroundUnknownEffect(t *testing.T) {
	t.Parallel()
	const bg, bg2 = "01J00000000000000000000002", "01J00000000000000000000003"
	st := &conversation.State{ID: "01J00000000000000000000000", Pending: &deferred.PendingRecord{Tasks: []deferred.PendingTask{
		{TaskID: bg, Kind: deferred.KindBackground, Tool: "charge"},
		{TaskID: bg2, Kind: deferred.KindBackground, Tool: "charge"},
	}}}
	var re *conversation.RefusedError
	err := st.Admit(conversation.ArrivalResult, bg, []byte(`{"status":"approval_required","metadata":{"reason":"big"}}`), 0, time.Now(), 0)
	if !errors.As(err, &re) || re.Reason != conversation.ReasonMalformed {
		t.Fatalf("a tool's own deferral: %v, want refused malformed", err)
	}
	if err := st.Admit(conversation.ArrivalResult, bg2, []byte(`{"status":"approval_required","metadata":{"offload.effect":"unknown","worker":"w1"}}`), 0, time.Now(), 0); err != nil {
		t.Fatalf("an unknown effect: %v", err)
	}
	if !st.Arrived(bg2) || st.Arrived(bg) {
		t.Fatalf("arrivals %+v", st.Arrivals)
	}
}
