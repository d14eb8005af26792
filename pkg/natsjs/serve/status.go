package serve

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/offload-dev/offload/pkg/natsjs/convstore"
	"github.com/offload-dev/offload/pkg/session"
)

// The statuses of a conversation (SPEC §11), as the session records them.
const (
	StatusRunning  = session.StatusRunning
	StatusPaused   = session.StatusPaused
	StatusFinished = session.StatusFinished
	StatusFailed   = session.StatusFailed
)

// Statuses are the statuses, in the order of SPEC §11.
var Statuses = []string{StatusRunning, StatusPaused, StatusFinished, StatusFailed}

// statusIndex is a store that keeps the status index (convstore.Store).
type statusIndex interface {
	GetStatus(ctx context.Context, id string) (*convstore.Status, error)
	Statuses(ctx context.Context, fn func(convstore.Status) error) error
}

// index returns the store's status index, nil when it keeps none.
func (s *Service) index() statusIndex {
	si, _ := s.cfg.Session.Store.(statusIndex)
	return si
}

// List calls fn with the status of every conversation in the status
// index (every stored conversation run since the index existed, or
// backfilled by agent provision: none loaded, none kept), of status only
// when status is set. An entry that says running while no process holds
// the conversation's lease (its holder was killed, or its end's write
// was lost) reads as paused: no run of it is live, and it waits for a
// replica or agent resume to continue it. Only running entries cost a
// lease read.
func (s *Service) List(ctx context.Context, status string, fn func(convstore.Status) error) error {
	si := s.index()
	if si == nil {
		return nil
	}
	sr, _ := s.cfg.Session.Store.(summaryReader)
	return si.Statuses(ctx, func(st convstore.Status) error {
		if st.Status == StatusRunning && sr != nil {
			lease, err := sr.ReadLease(ctx, st.ConversationID)
			if err != nil {
				return err
			}
			if !lease.Held {
				st.Status = StatusPaused
			}
		}
		if status != "" && st.Status != status {
			return nil
		}
		return fn(st)
	})
}

// ConversationsCollector returns the collector of the gauge
// offload_conversations{status}: counted from the status index at each
// scrape, true across replicas, no conversation kept in memory.
func (s *Service) ConversationsCollector() prometheus.Collector {
	return &conversationsCollector{s: s, desc: prometheus.NewDesc("offload_conversations",
		"Stored conversations, by status (running, paused, finished, failed), from the store.", []string{"status"}, nil)}
}

// scrapeTimeout bounds a scrape's count of the status index.
const scrapeTimeout = 5 * time.Second

type conversationsCollector struct {
	s    *Service
	desc *prometheus.Desc
}

// Describe implements prometheus.Collector.
func (c *conversationsCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

// Collect implements prometheus.Collector.
func (c *conversationsCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), scrapeTimeout)
	defer cancel()
	counts := map[string]int{}
	if err := c.s.List(ctx, "", func(st convstore.Status) error {
		counts[st.Status]++
		return nil
	}); err != nil {
		ch <- prometheus.NewInvalidMetric(c.desc, err)
		return
	}
	for _, st := range Statuses {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(counts[st]), st)
	}
}
