package serve

import (
	"context"
	"log/slog"
	"time"
)

// indexRepairer is a store that repairs the index of pending calls and
// the index of statuses (convstore.Store.RepairIndex, SPEC §21): the
// entries of calls no record holds any more (a record expired, a process
// killed between a record's write and its entries' removal) removed,
// those the records hold and the index lacks added; the messages of
// statuses no entry says removed, those of entries the index lacks
// published.
type indexRepairer interface {
	RepairIndex(ctx context.Context) (added, removed int, err error)
}

// indexRepairLoop repairs the indexes of pending calls and statuses every
// Config.IndexRepairInterval, jittered, until Close asks the live runs to
// suspend: the pages skip a stale entry (each is read against its
// record), but every one costs a read.
func (s *Service) indexRepairLoop(r indexRepairer) {
	defer s.wg.Done()
	iv := s.cfg.IndexRepairInterval
	t := time.NewTimer(jitter(iv))
	defer t.Stop()
	for {
		select {
		case <-s.suspend:
			return
		case <-t.C:
			ctx, cancel := context.WithTimeout(s.ctx, iv)
			added, removed, err := r.RepairIndex(ctx)
			cancel()
			switch {
			case err != nil:
				s.log.Warn("indexes of pending calls and statuses: repair", slog.Any("error", err))
			case added+removed > 0:
				s.log.Info("indexes of pending calls and statuses repaired", slog.Int("added", added), slog.Int("removed", removed))
			}
			t.Reset(jitter(iv))
		}
	}
}
