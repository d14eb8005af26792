package toolctl

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// CollectTimeout bounds the count of the dead letters at one scrape.
const CollectTimeout = 5 * time.Second

// DeadLetters is the gauge offload_dead_letters{tool} (SPEC §19): at each
// scrape it counts the dead letters kept per tool (stream <PREFIX>_DEAD,
// one subject per call), as [Control.List] does, so the count is the
// store's, the same on every replica that reports it (agent serve). A
// tool whose dead letters were all replayed or discarded is not exported.
type DeadLetters struct {
	c    *Control
	desc *prometheus.Desc
}

var _ prometheus.Collector = (*DeadLetters)(nil)

// NewDeadLetters returns the collector of c's dead letters.
func NewDeadLetters(c *Control) *DeadLetters {
	return &DeadLetters{c: c, desc: prometheus.NewDesc("offload_dead_letters",
		"Number of calls kept as dead letters (their deliveries exhausted), by tool.", []string{"tool"}, nil)}
}

// Describe implements prometheus.Collector.
func (d *DeadLetters) Describe(ch chan<- *prometheus.Desc) { ch <- d.desc }

// Collect implements prometheus.Collector: the counts as they are now; a
// failed read is reported as an invalid metric (the scrape fails rather
// than showing a wrong count).
func (d *DeadLetters) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), CollectTimeout)
	defer cancel()
	counts, err := d.Count(ctx)
	if err != nil {
		ch <- prometheus.NewInvalidMetric(d.desc, err)
		return
	}
	for name, n := range counts {
		ch <- prometheus.MustNewConstMetric(d.desc, prometheus.GaugeValue, float64(n), name)
	}
}

// Count returns the dead letters kept, by tool.
func (d *DeadLetters) Count(ctx context.Context) (map[string]int, error) {
	if err := d.c.ensure(ctx); err != nil {
		return nil, err
	}
	byName := map[string]*Tool{}
	err := d.c.countDead(ctx, func(name string) *Tool {
		if byName[name] == nil {
			byName[name] = &Tool{Name: name}
		}
		return byName[name]
	})
	counts := make(map[string]int, len(byName))
	for name, t := range byName {
		counts[name] = t.DeadLetters
	}
	return counts, err
}
