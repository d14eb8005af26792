package serve

import (
	"context"
	"log/slog"
	"time"
)

// indexRepairer is a store that repairs the index of pending calls
// (convstore.Store.RepairIndex, SPEC §21): the entries of calls no record
// holds any more (a record expired, a process killed between a record's
// write and its entries' removal) removed, those the records hold and the
// index lacks added.
type indexRepairer interface {
	RepairIndex(ctx context.Context) (added, removed int, err error)
}

// indexRepairLoop repairs the index of pending calls every
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
				s.log.Warn("index of pending calls: repair", slog.Any("error", err))
			case added+removed > 0:
				s.log.Info("index of pending calls repaired", slog.Int("added", added), slog.Int("removed", removed))
			}
			t.Reset(jitter(iv))
		}
	}
}
