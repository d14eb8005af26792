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
	"github.com/offload-dev/offload/pkg/pending"
)

// The fallback of a server that cannot schedule messages (SPEC §12): the
// replicas write the timeouts themselves. Every Config.TimerInterval each
// replica reads the pending records and, for each approval of an agent it
// serves past its timeout with no decision stored, publishes the
// timeout's decision first-wins (the server refuses all but the first of
// the replicas' and people's). Unlike the scheduled messages, a call
// expires only while a replica runs.

// timerSkew is how long after a call's timeout the replicas write its
// decision: its reader admits it only stored at or after the deferral
// (the agent's clock) plus the timeout (the server's clock), so that a
// replica's clock ahead of the server's by less than this is no matter.
const timerSkew = 2 * time.Second

// timersLoop runs the fallback's sweeps until Stop asks the live runs to
// suspend.
func (s *Service) timersLoop() {
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

// sweep publishes the timeout's decision of every approval of an agent
// this replica serves past its timeout at now (another replica's agent's
// policies are not known here).
func (s *Service) sweep(ctx context.Context, now time.Time) error {
	calls, err := s.records.Calls(ctx, pending.Filter{Kinds: []deferred.Kind{deferred.KindApproval}})
	if err != nil {
		return err
	}
	for _, c := range calls {
		if _, ok := s.agents[c.Agent]; !ok {
			continue
		}
		// The call's timeout as its record saved it (what its reader
		// admits), else its agent's policy here.
		exp := c.Expiry
		if exp == nil {
			exp = s.policy(ctx, c.Agent, c.Tool).Expiry()
		}
		at := c.Requested()
		if exp == nil || at.IsZero() || now.Before(at.Add(exp.After+timerSkew)) {
			continue
		}
		data, err := json.Marshal(conversation.TimeoutDecision(*exp))
		if err != nil {
			return err
		}
		_, err = s.cfg.Records.Publisher.PublishFirst(ctx, conversation.ArrivalDecision, c.ConversationID, c.TaskID, data)
		switch {
		case errors.Is(err, natsjs.ErrAlreadyAnswered):
		case err != nil:
			return err
		default:
			s.log.Info("approval expired", slog.String("conversation_id", c.ConversationID), slog.String("task_id", c.TaskID), slog.String("tool", c.Tool))
		}
	}
	return nil
}
