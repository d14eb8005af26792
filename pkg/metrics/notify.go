package metrics

import "github.com/prometheus/client_golang/prometheus"

// Notify holds the metrics of `agent serve --notify` (SPEC §12).
type Notify struct {
	// NotificationsTotal counts the notifications of each receiver kind
	// (webhook, slack) by outcome: sent (a 2xx answer), retried (an attempt
	// that failed and was tried again), failed (given up after the last
	// attempt): offload_notifications_total{kind,outcome}.
	NotificationsTotal *prometheus.CounterVec

	all collectors
}

// Outcomes of offload_notifications_total.
const (
	NotifySent    = "sent"
	NotifyRetried = "retried"
	NotifyFailed  = "failed"
)

// NewNotify creates the notification metrics and registers them with reg
// (nil: not registered).
func NewNotify(reg prometheus.Registerer) *Notify {
	n := &Notify{
		NotificationsTotal: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "offload_notifications_total",
			Help: "Total number of approval notification attempts of agent serve --notify, by receiver kind and outcome (sent, retried, failed).",
		}, []string{"kind", "outcome"}),
	}
	n.all = collectors{n.NotificationsTotal}
	if reg != nil {
		reg.MustRegister(n)
	}
	return n
}

// Count counts one notification attempt of a receiver of kind with
// outcome. A nil *Notify counts nothing.
func (n *Notify) Count(kind, outcome string) {
	if n == nil {
		return
	}
	n.NotificationsTotal.WithLabelValues(kind, outcome).Inc()
}

// Describe implements [prometheus.Collector].
func (n *Notify) Describe(ch chan<- *prometheus.Desc) { n.all.describe(ch) }

// Collect implements [prometheus.Collector].
func (n *Notify) Collect(ch chan<- prometheus.Metric) { n.all.collect(ch) }
