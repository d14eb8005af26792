package serve

import (
	"context"
	"log/slog"
	"time"

	"github.com/offload-dev/offload/pkg/session"
)

// The lease holder's re-check. A wake message for a conversation whose
// lease is held is delivered again later and later (heldDelay), at the
// latest when the lease would lapse (a holder SIGKILLed meanwhile: that
// delivery continues the conversation), not every RetryDelay; a message
// stored while the holder was ending, after its last read and before its
// release, would then wait for that redelivery. So the holder, once it let go of the
// conversation, looks at the subjects of what the conversation still
// waits for (direct gets) and publishes the conversation's wake marker
// when a message stored past its reads completes it: a replica continues
// it at once.

// recheck publishes the wake marker of sess's conversation, released
// already, when what it waits for is complete with messages stored
// past the session's reads.
func (s *Service) recheck(sess *session.Session) {
	sum, cp := sess.Summary()
	if sum == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(s.ctx), 5*time.Second)
	defer cancel()
	arrived, err := s.cfg.Inbox.ArrivedAfter(ctx, sum, cp)
	if err != nil {
		s.log.Warn("re-check after release failed; what arrived is delivered again when due", slog.String("conversation_id", sess.ID()), slog.Any("error", err))
		return
	}
	if !complete(sum, arrived) {
		return
	}
	s.log.Debug("arrived while the run ended: woken", slog.String("conversation_id", sess.ID()))
	s.handOver(sess.ID())
}

// heldDelay is how long a wake message of conversation id, held by
// another process (or a run of this replica), waits before its
// delivered+1-th delivery: RetryDelay doubled at each delivery (a wake's
// brief claim is over by the first), but never past the lease's lapse
// and RetryDelay more (a holder SIGKILLed meanwhile: that delivery
// continues the conversation). A run live for D is so woken about
// log2(D/RetryDelay) times per message rather than D/RetryDelay; the
// holder's re-check wakes the conversation at once when the message
// arrived past its reads.
func (s *Service) heldDelay(id string, delivered uint64) time.Duration {
	delay := s.cfg.RetryDelay << min(max(delivered, 1)-1, 16)
	if delay <= s.cfg.RetryDelay {
		return s.cfg.RetryDelay
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(s.ctx), 5*time.Second)
	defer cancel()
	until, err := s.cfg.Store.LeaseExpiry(ctx, id)
	if err != nil || until.IsZero() {
		return s.cfg.RetryDelay // released meanwhile: try again soon
	}
	return min(delay, time.Until(until)+s.cfg.RetryDelay)
}
