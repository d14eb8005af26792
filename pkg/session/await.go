package session

import (
	"context"
	"log/slog"
	"slices"
	"time"

	"github.com/offload-dev/offload/pkg/agent"
	"github.com/offload-dev/offload/pkg/conversation"
	"github.com/offload-dev/offload/pkg/deferred"
	"github.com/offload-dev/offload/pkg/tool"
)

// How often a wait for arrivals reads the streams: without a watch (it
// could not be started), and with one, as a safety net only.
const (
	pollInterval    = 200 * time.Millisecond
	watchedInterval = 5 * time.Second
)

// AwaitDecisions returns the capability of --approve wait: each step's
// approvals are announced, and decisions are read from the stream as they
// arrive (checked like any other: unknown, duplicate or malformed ones are
// refused), until every approval of the step has one, wait passes, the run
// ends or suspend is closed. The decided calls go on at once; the others
// pause the run as with defer.
func (s *Session) AwaitDecisions(wait time.Duration, suspend <-chan struct{}) agent.Capability {
	return agent.HandleDeferredToolCalls(s.AwaitDecisionsHandler(wait, suspend))
}

// AwaitDecisionsHandler is the deferred-call handler of [Session.AwaitDecisions],
// for a caller that wraps it (e.g. to time the approvals it decides).
func (s *Session) AwaitDecisionsHandler(wait time.Duration, suspend <-chan struct{}) agent.DeferredHandlerFunc {
	return func(ctx context.Context, rc *tool.RunContext, reqs *deferred.Requests) (*deferred.Results, error) {
		return s.await(ctx, rc, reqs, wait, suspend)
	}
}

func (s *Session) await(ctx context.Context, rc *tool.RunContext, reqs *deferred.Requests, wait time.Duration, suspend <-chan struct{}) (*deferred.Results, error) {
	if len(reqs.Approvals) == 0 || s.cfg.Inbox == nil {
		return nil, nil
	}
	s.mu.Lock()
	tmp := &conversation.State{ID: s.st.ID, Settled: slices.Clone(s.st.Settled), Checkpoint: s.st.Checkpoint,
		Pending: &deferred.PendingRecord{ConversationID: s.st.ID, RunID: rc.RunID}}
	from := len(s.st.History)
	s.mu.Unlock()
	mine := map[string]bool{}
	for _, t := range reqs.Pending() {
		if t.Kind == deferred.KindApproval {
			// The quorum its tool needs (SPEC §12): the inline wait
			// counts its approvals as a continuation does.
			if t.Required == 0 && s.cfg.Quorum != nil {
				if n := s.cfg.Quorum(ctx, t.Tool); n > 1 {
					t.Required = n
				}
			}
			// And its timeout: a timeout's decision is admitted only as
			// it (SPEC §12).
			if t.Expiry == nil && s.cfg.Expiry != nil {
				t.Expiry = s.cfg.Expiry(ctx, t.Tool).Expiry()
			}
			tmp.Pending.Tasks = append(tmp.Pending.Tasks, t)
			mine[t.TaskID] = true
		}
	}
	own := &deferred.PendingRecord{ConversationID: tmp.ID, RunID: rc.RunID, Tasks: slices.Clone(tmp.Pending.Tasks)}
	s.mu.Lock()
	if s.inline == nil {
		s.inline = map[string]inlineCall{}
	}
	for _, t := range own.Tasks {
		s.inline[t.TaskID] = inlineCall{pt: t}
	}
	nb := s.nb
	s.mu.Unlock()
	// The non-blocking calls' decisions are their waiter's: admitted here
	// (not refused as unknown) and left to it.
	if nb != nil {
		tmp.Pending.Tasks = append(tmp.Pending.Tasks, nb.tasks()...)
	}
	// Watch before the first read, so that no decision stored between
	// the two goes unnoticed.
	arrived, interval, stop := s.watch(ctx, conversation.ArrivalDecision)
	defer stop()
	announced := time.Now()
	s.announce(ctx, own)
	if err := waitFor(ctx, arrived, interval, wait, suspend, func() (bool, error) {
		_, err := s.cfg.Inbox.CollectDecisions(ctx, tmp)
		for _, t := range waiting(tmp) {
			if mine[t.TaskID] {
				return false, err
			}
		}
		return true, err
	}); err != nil {
		return nil, err
	}
	s.mu.Lock()
	// Only decisions were read, checked against this step's approvals;
	// the checkpoint stays before a non-blocking call's decision, which
	// its waiter delivers (its own checkpoint moves the session's then).
	cp := tmp.Checkpoint.Decisions
	for _, a := range tmp.Arrivals {
		if !mine[a.TaskID] && a.Seq > 0 {
			cp = min(cp, a.Seq-1)
		}
	}
	for _, v := range tmp.Votes {
		if !mine[v.TaskID] && v.Seq > 0 {
			cp = min(cp, v.Seq-1) // its waiter counts it
		}
	}
	s.st.Checkpoint.Decisions = max(s.st.Checkpoint.Decisions, cp)
	// The approvals counted for the quorum of a call still undecided
	// are past the checkpoint: they are kept, for the run that
	// continues the conversation.
	for _, v := range tmp.Votes {
		if mine[v.TaskID] && !tmp.Arrived(v.TaskID) {
			s.st.Votes = mergeVotes(s.st.Votes, []conversation.Vote{v})
		}
	}
	res := &deferred.Results{Calls: map[string]any{}, Approvals: map[string]any{}, Metadata: map[string]map[string]any{}}
	for _, a := range tmp.Arrivals {
		if !mine[a.TaskID] {
			continue
		}
		t, _ := tmp.PendingTask(a.TaskID)
		s.approvalSpan(ctx, t, a, announced)
		if err := s.applyLocked(res, t, a, from); err != nil {
			s.mu.Unlock()
			return nil, err
		}
		s.inline[a.TaskID] = inlineCall{pt: t, decided: true}
		s.handed = append(s.handed, a)
	}
	s.mu.Unlock()
	s.notify(ctx)
	return res, nil
}

// AwaitArrivals reads what arrives for the conversation (with
// [Session.Collect], which saves it) until every pending deferred call has
// its answer, d passes or suspend is closed (it then returns nil: the
// caller looks at what is still waited for), or ctx ends (its error). It
// watches the streams, so that an arrival is read as it is stored (agent
// resume --approve wait).
func (s *Session) AwaitArrivals(ctx context.Context, d time.Duration, suspend <-chan struct{}) error {
	arrived, interval, stop := s.WatchArrivals(ctx)
	defer stop()
	// What was stored before the watch began is read at once.
	return waitFor(ctx, arrived, interval, d, suspend, func() (bool, error) {
		if _, err := s.Collect(ctx); err != nil {
			return false, err
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		return len(waiting(s.st)) == 0, nil
	})
}

// waitFor calls collect, then again at each signal of arrived and every
// interval, until it reports done or fails, d passes or suspend is closed
// (nil), or ctx ends (its error).
func waitFor(ctx context.Context, arrived <-chan struct{}, interval, d time.Duration, suspend <-chan struct{}, collect func() (done bool, err error)) error {
	timer := time.NewTimer(d)
	defer timer.Stop()
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		done, err := collect()
		if err != nil || done {
			return err
		}
		select {
		case <-arrived:
		case <-tick.C:
		case <-timer.C:
			return nil
		case <-suspend:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// WatchArrivals watches for the decisions, answers and results of the
// conversation, for a caller waiting for its pending calls' answers (agent
// resume --approve wait): read them with [Session.Collect] when signal
// receives, and also every interval as a safety net. When the watch
// cannot be started (it is logged), signal is nil and interval short.
// Call stop when done.
func (s *Session) WatchArrivals(ctx context.Context) (signal <-chan struct{}, interval time.Duration, stop func()) {
	return s.watch(ctx, conversation.ArrivalDecision, conversation.ArrivalAnswer, conversation.ArrivalResult)
}

func (s *Session) watch(ctx context.Context, kinds ...conversation.ArrivalKind) (<-chan struct{}, time.Duration, func()) {
	if s.cfg.Inbox == nil {
		return nil, pollInterval, func() {}
	}
	signal, stop, err := s.cfg.Inbox.Watch(ctx, s.st.ID, kinds...)
	if err != nil {
		s.log.Warn("cannot watch for arrivals; polling", slog.Duration("every", pollInterval), slog.Any("error", err))
		return nil, pollInterval, func() {}
	}
	return signal, watchedInterval, stop
}
