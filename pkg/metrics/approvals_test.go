package metrics_test

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/offload-dev/offload/pkg/metrics"
)

// TestApprovalsMetrics: the approvals' set registers beside the agent's,
// is lint-clean, and records outcomes and decision times by tool.
func TestApprovalsMetrics(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	metrics.NewAgent(reg)
	a := metrics.NewApprovals(reg)
	a.Decided("deploy", metrics.ApprovalApproved, 30*time.Second)
	a.Decided("deploy", metrics.ApprovalDenied, 2*time.Hour)
	a.Decided("deploy", metrics.ApprovalExpired, 24*time.Hour)
	(*metrics.Approvals)(nil).Decided("deploy", metrics.ApprovalApproved, time.Second) // no set: nothing
	problems, err := testutil.CollectAndLint(a)
	if err != nil || len(problems) > 0 {
		t.Fatalf("lint: %v %v", problems, err)
	}
	want := `
# HELP offload_approvals_total Total number of approvals decided, by tool and outcome (approved, denied, expired).
# TYPE offload_approvals_total counter
offload_approvals_total{outcome="approved",tool="deploy"} 1
offload_approvals_total{outcome="denied",tool="deploy"} 1
offload_approvals_total{outcome="expired",tool="deploy"} 1
`
	if err := testutil.CollectAndCompare(a, strings.NewReader(want), "offload_approvals_total"); err != nil {
		t.Error(err)
	}
	if n := testutil.CollectAndCount(a, "offload_decision_seconds"); n != 1 {
		t.Errorf("%d decision_seconds series, want 1 (deploy)", n)
	}
	if _, err := reg.Gather(); err != nil {
		t.Fatal(err)
	}
}
