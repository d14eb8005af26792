package session_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/offload-dev/offload/pkg/conversation"
	"github.com/offload-dev/offload/pkg/deferred"
	"github.com/offload-dev/offload/pkg/metrics"
	"github.com/offload-dev/offload/pkg/session"
)

// TestDecisionsCounted: a decision applied on a resume is counted in
// offload_approvals_total{tool,outcome} (a timeout's, of a call whose
// policy has one, as expired, never as denied) and timed in
// offload_decision_seconds{tool}.
func TestDecisionsCounted(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ap := metrics.NewApprovals(nil)
	for _, decision := range []string{
		`{"approved":true,"by":"ann"}`,
		`{"approved":false,"by":"bob"}`,
		`{"approved":false,"by":"timeout","reason":"expired","on_timeout":"deny"}`,
	} {
		store := conversation.NewMemory()
		rec := &recorder{}
		id, pending := pausedConversation(t, store, rec)
		appr, ext := taskOf(t, pending, deferred.KindApproval), taskOf(t, pending, deferred.KindExternal)
		expiry := func(context.Context, string) *session.ApprovalPolicy {
			return &session.ApprovalPolicy{Timeout: time.Nanosecond, OnTimeout: session.OnTimeoutDeny}
		}
		s, err := session.Open(ctx, session.Config{Store: store, Announcer: rec, Canceller: rec, Approvals: ap, Expiry: expiry}, id, false)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Admit(conversation.ArrivalDecision, appr.TaskID, []byte(decision)); err != nil {
			t.Fatal(err)
		}
		if err := s.Admit(conversation.ArrivalAnswer, ext.TaskID, []byte(`{"content":"42"}`)); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Prepare(""); err != nil {
			t.Fatal(err)
		}
		s.Close()
	}
	want := `
# HELP offload_approvals_total Total number of approvals decided, by tool and outcome (approved, denied, expired).
# TYPE offload_approvals_total counter
offload_approvals_total{outcome="approved",tool="deploy"} 1
offload_approvals_total{outcome="denied",tool="deploy"} 1
offload_approvals_total{outcome="expired",tool="deploy"} 1
`
	if err := testutil.CollectAndCompare(ap, strings.NewReader(want), "offload_approvals_total"); err != nil {
		t.Error(err)
	}
	if n := testutil.CollectAndCount(ap, "offload_decision_seconds"); n != 1 {
		t.Errorf("%d offload_decision_seconds series, want deploy's", n)
	}
	if problems, err := testutil.CollectAndLint(ap); err != nil || len(problems) > 0 {
		t.Errorf("lint: %v %v", problems, err)
	}
}
