package conversation_test

import (
	"errors"
	"testing"
	"time"

	"github.com/offload-dev/offload/pkg/conversation"
	"github.com/offload-dev/offload/pkg/deferred"
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
