package conversation_test

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

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
