package serve

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/offload-dev/offload/pkg/conversation"
	"github.com/offload-dev/offload/pkg/pending"
)

// List calls fn with the status of every conversation in the status
// index (every stored conversation run since the index existed, or
// backfilled by agent provision: none loaded, none kept), of status only
// when status is set. An entry that says running while no process holds
// the conversation's lease (its holder was killed, or its end's write
// was lost) reads as paused: no run of it is live, and it waits for a
// replica or agent resume to continue it. Only running entries cost a
// lease read.
func (s *Service) List(ctx context.Context, status string, fn func(conversation.Status) error) error {
	return s.cfg.Store.Statuses(ctx, func(st conversation.Status) error {
		if st.Status == conversation.StatusRunning {
			lease, err := s.cfg.Store.ReadLease(ctx, st.ConversationID)
			if err != nil {
				return err
			}
			if !lease.Held {
				st.Status = conversation.StatusPaused
			}
		}
		if status != "" && st.Status != status {
			return nil
		}
		return fn(st)
	})
}

// ConversationsCollector returns the collector of the gauge
// offload_conversations{status}: counted from the index of statuses at
// each scrape (countStatuses), true across replicas, no conversation
// kept in memory.
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
	counts, err := c.s.countStatuses(ctx)
	if err != nil {
		ch <- prometheus.NewInvalidMetric(c.desc, err)
		return
	}
	for _, st := range conversation.Statuses {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(counts[st]), st)
	}
}

// countStatuses counts the conversations of each status as List would
// list them, without reading every entry: the server's counts of the
// index of statuses by subject (Store.StatusCounts), but for the running
// ones, read from the index's running pages (each against its entry)
// with their leases: an entry that says running while no process holds
// the lease counts as paused. A scrape costs the four counts and a read
// per running conversation, however many are stored; a conversation
// whose status just changed may still count under its former one too for
// the moment its former message takes to be removed (convstore's
// cleanStatuses).
func (s *Service) countStatuses(ctx context.Context) (map[string]int, error) {
	counts, err := s.cfg.Store.StatusCounts(ctx)
	if err != nil {
		return nil, err
	}
	counts[conversation.StatusRunning] = 0
	for before := uint64(0); ; {
		sts, next, err := s.cfg.Store.StatusPage(ctx, conversation.StatusRunning, before, pending.MaxPageSize)
		if err != nil {
			return nil, err
		}
		for _, st := range sts {
			lease, err := s.cfg.Store.ReadLease(ctx, st.ConversationID)
			if err != nil {
				return nil, err
			}
			if lease.Held {
				counts[conversation.StatusRunning]++
			} else {
				counts[conversation.StatusPaused]++
			}
		}
		if next == 0 {
			return counts, nil
		}
		before = next
	}
}
