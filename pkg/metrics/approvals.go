package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Outcomes of offload_approvals_total (SPEC §12).
const (
	ApprovalApproved = "approved"
	ApprovalDenied   = "denied"
	// ApprovalExpired is a decision written by the approval's timeout
	// (by "timeout", SPEC §12), never counted as a person's denial.
	ApprovalExpired = "expired"
)

// Approvals is the metric set of people's approvals (SPEC §12), recorded
// where decisions are applied to a conversation (pkg/session).
type Approvals struct {
	// ApprovalsTotal counts the approvals decided, by tool and outcome
	// (ApprovalApproved, ApprovalDenied, ApprovalExpired):
	// offload_approvals_total{tool,outcome}.
	ApprovalsTotal *prometheus.CounterVec
	// DecisionSeconds observes the time from an approval's announcement to
	// its decision being stored, in seconds: offload_decision_seconds{tool}.
	DecisionSeconds *prometheus.HistogramVec

	all collectors
}

var _ prometheus.Collector = (*Approvals)(nil)

// NewApprovals builds the approvals' metric set and registers it with reg
// (none when reg is nil). It panics if the metrics conflict with metrics
// already registered with reg, as [NewAgent] does.
func NewApprovals(reg prometheus.Registerer) *Approvals {
	a := &Approvals{
		ApprovalsTotal: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "offload_approvals_total",
			Help: "Total number of approvals decided, by tool and outcome (approved, denied, expired).",
		}, []string{"tool", "outcome"}),
		DecisionSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "offload_decision_seconds",
			Help:    "Time from an approval's announcement to its decision in seconds, by tool.",
			Buckets: approvalBuckets,
		}, []string{"tool"}),
	}
	a.all = collectors{a.ApprovalsTotal, a.DecisionSeconds}
	if reg != nil {
		reg.MustRegister(a)
	}
	return a
}

// Decided records a decision of tool's approval with outcome, took after
// its announcement. A nil set records nothing.
func (a *Approvals) Decided(tool, outcome string, took time.Duration) {
	if a == nil {
		return
	}
	a.ApprovalsTotal.WithLabelValues(tool, outcome).Inc()
	a.DecisionSeconds.WithLabelValues(tool).Observe(max(took, 0).Seconds())
}

// Describe implements prometheus.Collector.
func (a *Approvals) Describe(ch chan<- *prometheus.Desc) { a.all.describe(ch) }

// Collect implements prometheus.Collector.
func (a *Approvals) Collect(ch chan<- prometheus.Metric) { a.all.collect(ch) }
