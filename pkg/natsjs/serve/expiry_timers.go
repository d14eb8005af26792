package serve

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"time"

	"github.com/offload-dev/offload/pkg/conversation"
	"github.com/offload-dev/offload/pkg/deferred"
	"github.com/offload-dev/offload/pkg/natsjs"
	"github.com/offload-dev/offload/pkg/protocol"
)

// The fallback of a server that cannot schedule messages (SPEC §12): the
// replicas write the timeouts themselves. Every Config.TimerInterval each
// replica reads the pending records and, for each approval of an agent it
// serves past its timeout with no decision stored, publishes the
// timeout's decision first-wins (the server refuses all but the first of
// the replicas' and people's). Unlike the scheduled messages, a call
// expires only while a replica runs.

// timers runs the fallback's sweeps until Close asks the live runs to
// suspend.
func (s *Service) timers() {
	defer s.wg.Done()
	t := time.NewTicker(s.cfg.TimerInterval)
	defer t.Stop()
	for {
		select {
		case <-s.suspend:
			return
		case <-t.C:
			ctx, cancel := context.WithTimeout(s.ctx, s.cfg.TimerInterval+10*time.Second)
			if err := s.sweep(ctx, time.Now()); err != nil {
				s.log.Warn("approval timeouts: sweep", slog.Any("error", err))
			}
			cancel()
		}
	}
}

// sweep publishes the timeout's decision of every approval past its
// timeout at now.
func (s *Service) sweep(ctx context.Context, now time.Time) error {
	p := s.cfg.Timers
	ids, err := p.List(ctx)
	if err != nil {
		return err
	}
	for _, id := range ids {
		sum, err := p.Get(ctx, id)
		if errors.Is(err, conversation.ErrNotFound) {
			continue
		}
		if err != nil {
			return err
		}
		if _, ok := s.agents[sum.Agent]; !ok {
			continue // another replica's agent: its policies are not known here
		}
		waiting, err := p.Waiting(ctx, sum)
		if err != nil {
			return err
		}
		for _, t := range waiting {
			if t.Kind != deferred.KindApproval {
				continue
			}
			pol := s.policy(ctx, sum.Agent, t.Tool)
			tid, err := protocol.ParseID(t.TaskID)
			if pol == nil || err != nil || now.Before(tid.Timestamp().Add(pol.Timeout)) {
				continue
			}
			data, err := json.Marshal(pol.Decision())
			if err != nil {
				return err
			}
			_, err = p.Publisher.PublishFirst(ctx, conversation.ArrivalDecision, id, t.TaskID, data)
			switch {
			case errors.Is(err, natsjs.ErrAlreadyAnswered):
			case err != nil:
				return err
			default:
				s.log.Info("approval expired", slog.String("conversation_id", id), slog.String("task_id", t.TaskID), slog.String("tool", t.Tool))
			}
		}
	}
	return nil
}
