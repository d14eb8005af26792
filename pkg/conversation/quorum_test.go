package conversation_test

import (
	"errors"
	"testing"
	"time"

	"github.com/offload-dev/offload/pkg/conversation"
	"github.com/offload-dev/offload/pkg/deferred"
)

// quorumState is a conversation whose one pending approval needs two
// distinct approvers.
func quorumState() (*conversation.State, string) {
	const task = "01J00000000000000000000001"
	return &conversation.State{ID: "01J00000000000000000000000", Pending: &deferred.PendingRecord{Tasks: []deferred.PendingTask{
		{TaskID: task, Kind: deferred.KindApproval, Tool: "deploy", Required: 2},
	}}}, task
}

// admitQuorum admits data for task with the identities trusted (trust) or
// none authenticated, and returns the refusal's reason ("" when admitted).
func admitQuorum(t *testing.T, st *conversation.State, task, data string, trust bool) string {
	t.Helper()
	o := conversation.AdmitOptions{At: time.Now()}
	if trust {
		o.Identify = conversation.TrustBy
	}
	var re *conversation.RefusedError
	if err := st.AdmitWith(conversation.ArrivalDecision, task, []byte(data), o); !errors.As(err, &re) {
		if err != nil {
			t.Fatalf("%s: %v", data, err)
		}
		return ""
	}
	return re.Reason
}

// TestAdmitQuorum: an approval of a call that needs two approvers is
// counted and keeps the call pending; the same identity again is refused
// (duplicate_identity); the second distinct identity's approval is the
// call's arrival; after it, the task is resolved (duplicate).
func TestAdmitQuorum(t *testing.T) {
	t.Parallel()
	st, task := quorumState()
	for i, c := range []struct {
		data, want string
		arrived    bool
	}{
		{`{"approved":true,"by":"ann"}`, "", false},
		{`{"approved":true,"by":"ann"}`, conversation.ReasonDuplicateIdentity, false},
		{`{"approved":true,"by":"bob","override_args":{"target":"x"}}`, conversation.ReasonMalformed, false},
		{`{"approved":true,"by":"bob"}`, "", true},
		{`{"approved":true,"by":"cy"}`, conversation.ReasonDuplicate, true},
	} {
		if got := admitQuorum(t, st, task, c.data, true); got != c.want {
			t.Errorf("%d %s: refused %q, want %q", i, c.data, got, c.want)
		}
		if st.Arrived(task) != c.arrived {
			t.Errorf("%d %s: arrived %v, want %v", i, c.data, st.Arrived(task), c.arrived)
		}
	}
	if n := len(st.Arrivals); n != 1 || string(st.Arrivals[0].Data) != `{"approved":true,"by":"bob"}` {
		t.Errorf("arrivals %+v, want bob's approval alone", st.Arrivals)
	}
	if v := st.VotesFor(task); len(v) != 2 || v[0].By != "ann" || v[1].By != "bob" {
		t.Errorf("votes %+v, want ann then bob", v)
	}
}

// TestAdmitQuorumDenial: any denial of a call that needs a quorum is its
// arrival at once, after an approval and unauthenticated.
func TestAdmitQuorumDenial(t *testing.T) {
	t.Parallel()
	st, task := quorumState()
	if got := admitQuorum(t, st, task, `{"approved":true,"by":"ann"}`, true); got != "" {
		t.Fatalf("approval refused %q", got)
	}
	if got := admitQuorum(t, st, task, `{"approved":false,"message":"no"}`, false); got != "" || !st.Arrived(task) {
		t.Fatalf("denial refused %q, arrived %v; want the denial as the arrival", got, st.Arrived(task))
	}
}

// TestAdmitQuorumUnauthenticated: without an authenticated identity an
// approval of a call that needs a quorum is refused (unauthenticated),
// not counted as an anonymous approver; a call of one approver takes any
// decision as before.
func TestAdmitQuorumUnauthenticated(t *testing.T) {
	t.Parallel()
	st, task := quorumState()
	for _, data := range []string{`{"approved":true,"by":"ann"}`, `{"approved":true}`} {
		if got := admitQuorum(t, st, task, data, false); got != conversation.ReasonUnauthenticated {
			t.Errorf("%s: refused %q, want unauthenticated", data, got)
		}
	}
	if got := admitQuorum(t, st, task, `{"approved":true}`, true); got != conversation.ReasonUnauthenticated {
		t.Errorf("trusted approval without by: refused %q, want unauthenticated", got)
	}
	if len(st.Votes) != 0 || st.Arrived(task) {
		t.Errorf("votes %+v arrived %v after refusals", st.Votes, st.Arrived(task))
	}
	st.Pending.Tasks[0].Required = 1
	if got := admitQuorum(t, st, task, `{"approved":true}`, false); got != "" || !st.Arrived(task) {
		t.Errorf("approval of a one-approver call: refused %q, arrived %v", got, st.Arrived(task))
	}
}
