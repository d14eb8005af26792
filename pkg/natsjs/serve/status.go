package serve

import (
	"context"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/offload-dev/offload/pkg/natsjs/convstore"
)

// The statuses of a conversation (SPEC §11).
const (
	StatusRunning  = "running"
	StatusPaused   = "paused"
	StatusFinished = "finished"
	StatusFailed   = "failed"
)

// Statuses are the statuses, in the order of SPEC §11.
var Statuses = []string{StatusRunning, StatusPaused, StatusFinished, StatusFailed}

// statusIndex is a store that keeps the status index (convstore.Store).
type statusIndex interface {
	SetStatus(ctx context.Context, st convstore.Status) error
	GetStatus(ctx context.Context, id string) (*convstore.Status, error)
	Statuses(ctx context.Context, fn func(convstore.Status) error) error
}

// index returns the store's status index, nil when it keeps none.
func (s *Service) index() statusIndex {
	si, _ := s.cfg.Session.Store.(statusIndex)
	return si
}

// setStatus records conversation id's status in the index, as the lease
// holder; a failure is logged (the index is repaired by the next run's).
func (s *Service) setStatus(id, agentName, status string) {
	si := s.index()
	if si == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(s.ctx), 5*time.Second)
	defer cancel()
	if err := si.SetStatus(ctx, convstore.Status{ConversationID: id, Agent: agentName, Status: status}); err != nil {
		s.log.Warn("status not recorded", slog.String("conversation_id", id), slog.String("status", status), slog.Any("error", err))
	}
}

// List calls fn with the status of every conversation agent serve has
// run (the status index: none loaded, none kept), of status only when
// status is set.
func (s *Service) List(ctx context.Context, status string, fn func(convstore.Status) error) error {
	si := s.index()
	if si == nil {
		return nil
	}
	return si.Statuses(ctx, func(st convstore.Status) error {
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
		"Conversations agent serve has run, by status (running, paused, finished, failed), from the store.", []string{"status"}, nil)}
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
