package serve

import (
	"context"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/offload-dev/offload/pkg/conversation"
)

// Runs whose holder died: a replica SIGKILLed mid-run leaves its
// conversations' status entries saying running and stops renewing their
// leases. No message may ever come for such a conversation (a run started
// over the API has no wake message; a wake's was acked when its
// continuation started), so each replica watches the status index, keeps
// the conversations whose entry says running (a set as large as the runs
// live or orphaned, not as the conversations stored: a paused or finished
// one is dropped at its entry's write), and every Config.SweepInterval,
// jittered, continues those whose lease lapsed, as a wake marker would:
// the claim of the lease without waiting makes it one replica, the
// checkpoint and the store's compare-and-set one continuation.

// runningSet is the conversations whose status entry says running, with
// the entry's revision.
type runningSet struct {
	mu  sync.Mutex
	ids map[string]uint64
}

// update records an entry of the status index.
func (r *runningSet) update(st conversation.Status, rev uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if st.Status == conversation.StatusRunning {
		r.ids[st.ConversationID] = rev
		return
	}
	delete(r.ids, st.ConversationID)
}

// snapshot returns the set's conversations and revisions.
func (r *runningSet) snapshot() map[string]uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[string]uint64, len(r.ids))
	for id, rev := range r.ids {
		out[id] = rev
	}
	return out
}

// drop removes id unless its entry was written again since rev.
func (r *runningSet) drop(id string, rev uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ids[id] == rev {
		delete(r.ids, id)
	}
}

// lapsedLoop sweeps the running set every Config.SweepInterval, jittered
// by up to a half of it either way (replicas started together do not
// sweep together), and again just after the earliest lease of the set
// that lapses before then (a holder that stopped renewing: its
// conversation is continued as its lease lapses, SPEC §11's ≤ 15 s,
// not up to an interval later), until Close asks the live runs to
// suspend.
func (s *Service) lapsedLoop() {
	defer s.wg.Done()
	iv := s.cfg.SweepInterval
	t := time.NewTimer(jitter(iv))
	defer t.Stop()
	for {
		select {
		case <-s.suspend:
			return
		case <-t.C:
			ctx, cancel := context.WithTimeout(s.ctx, iv+10*time.Second)
			lapses := s.sweepLapsed(ctx)
			cancel()
			t.Reset(nextSweep(time.Now(), jitter(iv), lapses))
		}
	}
}

// nextSweep is how long until the next sweep: after wait, or just after
// lapses (a lease of the running set lapsing first) when that is sooner.
// The margin after it spreads the replicas' claims a little.
func nextSweep(now time.Time, wait time.Duration, lapses time.Time) time.Duration {
	if lapses.IsZero() {
		return wait
	}
	margin := 10*time.Millisecond + rand.N(40*time.Millisecond) //nolint:gosec // G404: a sweep's spread, not a secret
	if d := lapses.Sub(now) + margin; d < wait {
		return max(d, margin)
	}
	return wait
}

// jitter returns a duration drawn evenly from [iv/2, 3iv/2).
func jitter(iv time.Duration) time.Duration {
	return iv/2 + rand.N(iv) //nolint:gosec // G404: a sweep's spread, not a secret
}

// sweepLapsed continues every conversation of the running set that no
// process holds (its lease lapsed or was never renewed): one lease get
// per conversation, a load and a claim only for those free. It returns
// the earliest lapse of the leases still held (zero when none). One whose
// stored state has nothing to continue (its end's status write was lost,
// or it waits for a call: the wake path continues it when that arrives)
// is dropped from the set until its entry is written again.
func (s *Service) sweepLapsed(ctx context.Context) (lapses time.Time) {
	for id, rev := range s.running.snapshot() {
		if ctx.Err() != nil {
			return lapses
		}
		select {
		case <-s.suspend:
			return lapses
		default:
		}
		if s.live(id) != nil {
			continue
		}
		until, err := s.cfg.Store.LeaseExpiry(ctx, id)
		if err != nil {
			s.log.Warn("lapsed runs: lease not read", slog.String("conversation_id", id), slog.Any("error", err))
			continue
		}
		if time.Now().Before(until) {
			if lapses.IsZero() || until.Before(lapses) {
				lapses = until
			}
			continue
		}
		out, err := s.wake(ctx, id, time.Time{}, true)
		switch {
		case err != nil:
			s.log.Warn("lapsed runs: not continued; tried again at the next sweep", slog.String("conversation_id", id), slog.Any("error", err))
		case out == WakeContinued:
			s.log.Info("lapsed runs: continuing a run whose holder stopped renewing its lease", slog.String("conversation_id", id))
		case out == WakeConsumed, out == WakeMissingAgent:
			s.running.drop(id, rev)
		}
	}
	return lapses
}
