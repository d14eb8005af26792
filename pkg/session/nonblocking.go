package session

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/offload-dev/offload/pkg/agent"
	"github.com/offload-dev/offload/pkg/agent/background"
	"github.com/offload-dev/offload/pkg/conversation"
	"github.com/offload-dev/offload/pkg/deferred"
	"github.com/offload-dev/offload/pkg/protocol"
	"github.com/offload-dev/offload/pkg/tool"
)

// AnswerCollector is a [Collector] that also reads the answers stream
// alone (convstore.Inbox): the live wait of non-blocking external calls
// uses it; without it, their answers are read when the conversation is
// continued.
type AnswerCollector interface {
	CollectAnswers(ctx context.Context, st *conversation.State) (int, error)
}

// NonBlocking returns the session's waiter of non-blocking deferred calls
// (--approve background, SPEC §12), for background.NonBlockingConfig: each call
// is announced as it is waited for, and its decision (or answer) is read
// from the conversation's stream as it arrives, checked like any other,
// while the run goes on. A decision taken live is not recorded as read: a
// run that pauses or dies before delivering it finds it again when the
// conversation is continued.
func (s *Session) NonBlocking() background.DeferredWaiter {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.nb == nil {
		s.nb = &liveWaiter{s: s, waits: map[string]*liveWait{}, taken: map[string]bool{}}
	}
	return s.nb
}

// NonBlockingCalls returns the capability (background.NonBlockingCalls) that
// makes approval and external calls non-blocking with the session's
// waiter ([Session.NonBlocking]): every one with all (--approve
// background), else those of tools whose metadata has deferred:
// "background". An approved call runs with the executor of the run's own
// BackgroundTools, if it has one.
func (s *Session) NonBlockingCalls(all bool) agent.Capability {
	sel := background.NonBlockingSelector
	if all {
		// Every call but a frontend tool's (SPEC §18): the frontend
		// runs it once the run ended.
		sel = background.SelectFunc(func(_ context.Context, _ *agent.RunInfo, t *tool.Tool) bool {
			return t.Metadata[conversation.FrontendToolMeta] != true
		})
	}
	return background.NonBlockingCalls(background.NonBlockingConfig{Tools: sel, Waiter: s.NonBlocking()})
}

// liveWaiter watches the conversation's decisions and answers for its
// waits with one goroutine, running while any wait is live.
type liveWaiter struct {
	s *Session

	mu    sync.Mutex
	waits map[string]*liveWait
	taken map[string]bool // tasks whose outcome the watch took
	// st is what the watch reads into: its pending record lists the
	// waits; its checkpoint moves past what was read.
	st      *conversation.State
	added   int                // counts waits added, so that a read racing one is read again
	kick    chan struct{}      // signalled when a wait is added
	cancel  context.CancelFunc // ends the watch goroutine; nil while none runs
	stopped chan struct{}      // closed when the watch goroutine returned
}

// Wait implements [background.DeferredWaiter].
func (w *liveWaiter) Wait(ctx context.Context, info *agent.RunInfo, call deferred.PendingTask) (agent.BackgroundTask, error) {
	if w.s.cfg.Inbox == nil {
		return nil, fmt.Errorf("session: no inbox to read the decision of task %s from", call.TaskID)
	}
	// The quorum its tool needs (SPEC §12) is the call's, so that the
	// live read counts its approvals as a paused run's continuation does.
	if call.Kind == deferred.KindApproval && call.Required == 0 && w.s.cfg.Quorum != nil {
		if n := w.s.cfg.Quorum(ctx, call.Tool); n > 1 {
			call.Required = n
		}
	}
	// So is its timeout: a timeout's decision is admitted only as it.
	if call.Kind == deferred.KindApproval && call.Expiry == nil && w.s.cfg.Expiry != nil {
		call.Expiry = w.s.cfg.Expiry(ctx, call.Tool).Expiry()
	}
	lw := &liveWait{w: w, pt: call, done: make(chan struct{})}
	// The session's state is read before w.mu is taken: the session's
	// save takes w.mu while it holds its own (Session.updateLocked).
	w.s.mu.Lock()
	fresh := &conversation.State{ID: w.s.st.ID, Settled: slices.Clone(w.s.st.Settled), Checkpoint: w.s.st.Checkpoint,
		Pending: &deferred.PendingRecord{ConversationID: w.s.st.ID, RunID: info.RunID}}
	w.s.mu.Unlock()
	w.mu.Lock()
	if _, ok := w.waits[call.TaskID]; ok {
		w.mu.Unlock()
		return nil, fmt.Errorf("session: task %s is waited for already", call.TaskID)
	}
	if w.st == nil {
		w.st = fresh
	}
	w.st.Pending.Tasks = append(w.st.Pending.Tasks, call)
	w.waits[call.TaskID] = lw
	w.added++
	if w.cancel == nil {
		wctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		w.cancel, w.stopped, w.kick = cancel, make(chan struct{}), make(chan struct{}, 1)
		go w.watch(wctx, w.stopped, w.kick)
	} else {
		select {
		case w.kick <- struct{}{}:
		default:
		}
	}
	w.mu.Unlock()
	w.s.announce(ctx, &deferred.PendingRecord{ConversationID: w.s.st.ID, RunID: info.RunID, Tasks: []deferred.PendingTask{call}})
	return lw, nil
}

// watch reads the decisions (and answers) of the conversation at each
// signal of the stream's watch or kick, and every interval as a safety
// net, until no wait is left or ctx ends.
func (w *liveWaiter) watch(ctx context.Context, stopped, kick chan struct{}) {
	defer close(stopped)
	arrived, interval, stop := w.s.watch(ctx, conversation.ArrivalDecision, conversation.ArrivalAnswer)
	defer stop()
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		more, err := w.read(ctx)
		if err != nil && ctx.Err() == nil {
			w.s.log.Warn("non-blocking calls: decisions not read; trying again", slog.Any("error", err))
		}
		if !more {
			return
		}
		select {
		case <-arrived:
		case <-kick:
		case <-tick.C:
		case <-ctx.Done():
			return
		}
	}
}

// tasks returns the calls waited for.
func (w *liveWaiter) tasks() []deferred.PendingTask {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.st == nil {
		return nil
	}
	return slices.Clone(w.st.Pending.Tasks)
}

// read reads what arrived for the waits once and hands each its outcome.
// It reports whether waits are left. The decisions of the approvals an
// --approve wait step waits for are that wait's: admitted (not refused as
// unknown) and left to it.
func (w *liveWaiter) read(ctx context.Context) (bool, error) {
	w.s.mu.Lock()
	inline := maps.Clone(w.s.inline)
	w.s.mu.Unlock()
	w.mu.Lock()
	if len(w.waits) == 0 {
		w.stopLocked()
		w.mu.Unlock()
		return false, nil
	}
	tmp := &conversation.State{ID: w.st.ID, Settled: slices.Clone(w.st.Settled), Checkpoint: w.st.Checkpoint,
		Pending: &deferred.PendingRecord{ConversationID: w.st.ID, RunID: w.st.Pending.RunID, Tasks: slices.Clone(w.st.Pending.Tasks)},
		Votes:   slices.Clone(w.st.Votes)}
	for _, c := range inline {
		if _, ok := tmp.PendingTask(c.pt.TaskID); !ok {
			tmp.Pending.Tasks = append(tmp.Pending.Tasks, c.pt)
		}
	}
	added := w.added
	w.mu.Unlock()
	_, err := w.s.cfg.Inbox.CollectDecisions(ctx, tmp)
	if ac, ok := w.s.cfg.Inbox.(AnswerCollector); ok && err == nil {
		_, err = ac.CollectAnswers(ctx, tmp)
	}
	w.mu.Lock()
	if err != nil {
		w.mu.Unlock()
		return true, err
	}
	if w.added == added {
		// A wait added during the read could have had its decision
		// refused by it (not pending yet): then the stream is read again
		// from where this read began. Nor does it move past the decision
		// of an --approve wait approval not handed to the run yet: the
		// conversation's next reader may need it.
		cp := tmp.Checkpoint
		for _, a := range tmp.Arrivals {
			if c, ok := inline[a.TaskID]; ok && !c.decided && a.Seq > 0 {
				cp.Decisions = min(cp.Decisions, a.Seq-1)
			}
		}
		for _, v := range tmp.Votes {
			if c, ok := inline[v.TaskID]; ok && !c.decided && v.Seq > 0 {
				cp.Decisions = min(cp.Decisions, v.Seq-1)
			}
		}
		w.st.Checkpoint = cp
		// The approvals counted for a quorum go with the checkpoint
		// past them: a read again from before it counts them again.
		w.st.Votes = tmp.Votes
	}
	type outcome struct {
		lw *liveWait
		a  conversation.Arrival
	}
	var got []outcome
	for _, a := range tmp.Arrivals {
		lw, ok := w.waits[a.TaskID]
		if !ok {
			continue
		}
		w.st.Settled = append(w.st.Settled, a.TaskID)
		w.taken[a.TaskID] = true
		w.drop(a.TaskID)
		got = append(got, outcome{lw, a})
	}
	more := len(w.waits) > 0
	if !more {
		w.stopLocked()
	}
	w.mu.Unlock()
	// The outcomes are made without w.mu: they take the session's lock.
	for _, o := range got {
		o.lw.val, o.lw.err = w.s.nonBlockingValue(ctx, o.lw.pt, o.a)
		close(o.lw.done)
	}
	return more, nil
}

// checkpoint returns how far the watch read the streams when what it read
// may be skipped by a later read of the conversation: every outcome it
// took was delivered (still holds the tasks the run's pending record
// keeps), so a later read would only refuse them as duplicates. With it,
// it returns the approvals it counted up to there for the quorums of
// the calls still pending (a detached wait's), which a later read does
// not read again. Called by the session's save, with the session's lock
// held.
func (w *liveWaiter) checkpoint(still map[string]bool) (conversation.Checkpoint, []conversation.Vote, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.st == nil || len(w.taken) == 0 {
		return conversation.Checkpoint{}, nil, false
	}
	for task := range w.taken {
		if still[task] {
			return conversation.Checkpoint{}, nil, false // taken, not delivered: read it again
		}
	}
	var votes []conversation.Vote
	for _, v := range w.st.Votes {
		if still[v.TaskID] {
			votes = append(votes, v)
		}
	}
	return w.st.Checkpoint, votes, true
}

// stopLocked marks the watch goroutine as ending by itself (no wait is
// left): the next wait starts another. What it read (w.st) is kept.
// Called with w.mu held.
func (w *liveWaiter) stopLocked() {
	if w.cancel != nil {
		w.cancel()
		w.cancel = nil
	}
}

// drop forgets the wait of task. Called with w.mu held.
func (w *liveWaiter) drop(task string) {
	delete(w.waits, task)
	w.st.Pending.Tasks = slices.DeleteFunc(w.st.Pending.Tasks, func(t deferred.PendingTask) bool { return t.TaskID == task })
}

// end forgets lw's wait; the last one stops the watch and waits for it.
func (w *liveWaiter) end(lw *liveWait, err error) {
	w.mu.Lock()
	if w.waits[lw.pt.TaskID] != lw {
		w.mu.Unlock()
		return
	}
	w.drop(lw.pt.TaskID)
	if err != nil {
		lw.err = err
		close(lw.done)
	}
	var cancel context.CancelFunc
	var stopped chan struct{}
	if len(w.waits) == 0 && w.cancel != nil {
		cancel, stopped = w.cancel, w.stopped
		w.cancel = nil
	}
	w.mu.Unlock()
	if cancel != nil {
		cancel()
		<-stopped
	}
}

// liveWait is one non-blocking call's wait.
type liveWait struct {
	w    *liveWaiter
	pt   deferred.PendingTask
	done chan struct{}
	val  any   // set before done is closed
	err  error // set before done is closed
}

func (lw *liveWait) Done() <-chan struct{} { return lw.done }

func (lw *liveWait) Outcome() (any, error) {
	<-lw.done
	return lw.val, lw.err
}

func (lw *liveWait) Cancel(reason string) { lw.w.end(lw, &tool.TaskCancelled{Reason: reason}) }

// Detach stops the wait: the decision stays in its stream for the run
// that continues the conversation.
func (lw *liveWait) Detach() bool {
	lw.w.end(lw, nil)
	return true
}

// nonBlockingValue is [Session.nonBlockingValueLocked] for the live wait:
// the resolution it owes is published at once.
func (s *Session) nonBlockingValue(ctx context.Context, t deferred.PendingTask, a conversation.Arrival) (any, error) {
	s.mu.Lock()
	val, err := s.nonBlockingValueLocked(t, a)
	s.mu.Unlock()
	if err != nil {
		return nil, err
	}
	s.notify(ctx)
	return val, nil
}

// nonBlockingValueLocked is the outcome of non-blocking call t that
// arrival a carries, as background.DeferredWaiter gives it: an approval value
// (an expiry as background.ApprovalExpired) or an answer's call value. The
// decision is recorded as any other (resolution, metrics).
func (s *Session) nonBlockingValueLocked(t deferred.PendingTask, a conversation.Arrival) (any, error) {
	res := &deferred.Results{Calls: map[string]any{}, Approvals: map[string]any{}, Metadata: map[string]map[string]any{}}
	if err := s.applyLocked(res, t, a, len(s.st.History)); err != nil {
		return nil, err
	}
	if a.Kind != conversation.ArrivalDecision {
		return res.Calls[t.ToolCallID], nil
	}
	d, err := protocol.DecodeDecision(a.Data, &protocol.DecodeOpts{MaxSize: -1})
	if err != nil {
		return nil, fmt.Errorf("session: stored decision of task %s: %w", t.TaskID, err)
	}
	if te, ok := res.Approvals[t.ToolCallID].(*deferred.ApprovalTimeoutError); ok {
		return te, nil // the run ends with it (on_timeout fail)
	}
	if !d.Approved && d.Reason == protocol.ReasonExpired {
		return background.ApprovalExpired{Message: d.Message}, nil
	}
	if m := res.Metadata[t.ToolCallID]; m != nil {
		return background.DecisionWithMetadata{Approval: res.Approvals[t.ToolCallID], Metadata: m}, nil
	}
	return res.Approvals[t.ToolCallID], nil
}
