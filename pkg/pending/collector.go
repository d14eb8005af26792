package pending

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/offload-dev/offload/pkg/conversation"
	"github.com/offload-dev/offload/pkg/deferred"
)

// pendingKinds are the kinds offload_pending_calls{kind} always exports.
var pendingKinds = []deferred.Kind{deferred.KindApproval, deferred.KindExternal, deferred.KindBackground}

// CollectTimeout bounds the reading of the pending records at one
// scrape.
const CollectTimeout = 5 * time.Second

// Collector is the gauge offload_pending_calls{kind} kept true
// across processes (SPEC §7, issue 29): at each scrape it reads the
// pending records of the store (KV tools_pending, which every agent
// process writes with each save, so that no process's own count is
// needed) and counts the calls waiting, by kind (approval, external,
// background). It is a prometheus.Collector to register where one process
// reports for the store (agent serve).
//
// Its name is that of the dispatcher's gauge offload_pending_calls{mode}
// ([metrics.Agent.PendingCalls]) with another label: one registry cannot
// hold both, so it is not registered beside an agent's metric set.
type Collector struct {
	d    *Desk
	desc *prometheus.Desc
}

var _ prometheus.Collector = (*Collector)(nil)

// NewCollector returns the collector of d's records.
func NewCollector(d *Desk) *Collector {
	return &Collector{d: d, desc: prometheus.NewDesc("offload_pending_calls",
		"Number of deferred and background calls waiting in the store's conversations, by kind.", []string{"kind"}, nil)}
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

// Collect implements prometheus.Collector: the counts of the records as
// they are now; a failed read is reported as an invalid metric (the
// scrape fails rather than showing a wrong count).
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), CollectTimeout)
	defer cancel()
	counts, err := c.Count(ctx)
	if err != nil {
		ch <- prometheus.NewInvalidMetric(c.desc, err)
		return
	}
	for _, k := range pendingKinds {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(counts[k]), string(k))
	}
}

// Count returns the calls waiting in the store's pending records, by kind.
func (c *Collector) Count(ctx context.Context) (map[deferred.Kind]int, error) {
	counts := map[deferred.Kind]int{}
	err := c.d.Records(ctx, func(s *conversation.Summary) error {
		for _, t := range s.Tasks {
			counts[t.Kind]++
		}
		return nil
	})
	return counts, err
}
