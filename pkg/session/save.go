package session

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/offload-dev/offload/pkg/agent"
	"github.com/offload-dev/offload/pkg/agent/background"
	"github.com/offload-dev/offload/pkg/conversation"
	"github.com/offload-dev/offload/pkg/deferred"
	"github.com/offload-dev/offload/pkg/message"
	"github.com/offload-dev/offload/pkg/telemetry"
	"github.com/offload-dev/offload/pkg/tool"
)

// saveLocked stores s.st with compare-and-set on the revision read.
func (s *Session) saveLocked(ctx context.Context) error {
	// A process whose lease was lost no longer writes: another may have
	// claimed the conversation and loaded it, and would then fail its own
	// save (or, worse, build on a state this process changed under it).
	select {
	case <-s.lease.Lost():
		return fmt.Errorf("session: conversation %s not saved: %w", s.st.ID, conversation.ErrLeaseLost)
	default:
	}
	// A shallow copy: the store only encodes it, and annotate replaces
	// (never edits) the messages it changes in its own copy of the slice.
	st := *s.st
	st.History = s.annotate(slices.Clone(s.st.History))
	st.UpdatedAt = time.Now().UTC()
	rev, err := s.cfg.Store.Save(ctx, &st, s.rev)
	if err != nil {
		return err
	}
	s.rev = rev
	return nil
}

// annotate records each decision on the first return of its call after
// the history index it was made at (a non-blocking call's on its
// acknowledgement, which names its task).
func (s *Session) annotate(h message.History) message.History {
	if len(s.decisions) == 0 {
		return h
	}
	for id, note := range s.decisions {
	find:
		for i := note.from; i < len(h); i++ {
			for j, p := range h[i].Parts {
				tr, ok := p.(message.ToolReturn)
				if !ok || tr.ToolCallID != id || note.task != "" && !strings.Contains(tr.ModelText(), note.task) {
					continue
				}
				md := tool.DeepCopy(tr.Metadata)
				if md == nil {
					md = map[string]any{}
				}
				md[cmp.Or(note.key, DecisionMetaKey)] = tool.DeepCopy(note.meta)
				tr.Metadata = md
				m := h[i]
				m.Parts = slices.Clone(m.Parts)
				m.Parts[j] = tr
				h[i] = m
				break find
			}
		}
	}
	return h
}

// update replaces the history and the pending record with the run's,
// applies the arrivals handed to the run, and records as settled every
// task no longer pending.
func (s *Session) updateLocked(h message.History, pending *deferred.PendingRecord) {
	if pending != nil && len(pending.Tasks) == 0 {
		pending = nil // a suspended run with nothing running
	}
	still := map[string]bool{}
	if pending != nil {
		for _, t := range pending.Tasks {
			still[t.TaskID] = true
		}
	}
	// A task settled without a result read from the results stream (a
	// background task the run consumed live, an approved call it ran, a
	// denied one) is marked so: its result stored there, if any, is the
	// run's, and reading it later is neither an arrival nor a duplicate.
	fromStream := map[string]bool{}
	for _, a := range s.handed {
		if a.Kind == conversation.ArrivalResult {
			fromStream[a.TaskID] = true
		}
	}
	settle := func(task string) {
		if still[task] || slices.Contains(s.st.Settled, task) {
			return
		}
		s.st.Settled = append(s.st.Settled, task)
		if !fromStream[task] {
			s.st.SettledLive = append(s.st.SettledLive, task)
		}
	}
	if s.st.Pending != nil {
		for _, t := range s.st.Pending.Tasks {
			settle(t.TaskID)
		}
	}
	for _, a := range s.handed {
		settle(a.TaskID)
	}
	s.st.Arrivals = slices.DeleteFunc(s.st.Arrivals, func(a conversation.Arrival) bool {
		return slices.ContainsFunc(s.handed, func(h conversation.Arrival) bool { return h.TaskID == a.TaskID })
	})
	s.handed = nil
	// A task pending again (a call a worker deferred once more) takes new
	// answers.
	s.st.Settled = slices.DeleteFunc(s.st.Settled, func(t string) bool { return still[t] })
	s.st.SettledLive = slices.DeleteFunc(s.st.SettledLive, func(t string) bool { return still[t] })
	// The approvals counted for a quorum end with their call.
	s.st.Votes = slices.DeleteFunc(s.st.Votes, func(v conversation.Vote) bool { return !still[v.TaskID] })
	s.st.History = h
	s.st.Pending = pending
	if s.nb != nil {
		// The decisions and answers a live wait took and the run
		// delivered are not read again by the conversation's next reader.
		// Nor are the approvals it counted for a quorum before that
		// checkpoint: they are saved with it.
		if cp, votes, ok := s.nb.checkpoint(still); ok {
			s.st.Checkpoint.Decisions = max(s.st.Checkpoint.Decisions, cp.Decisions)
			s.st.Checkpoint.Answers = max(s.st.Checkpoint.Answers, cp.Answers)
			s.st.Votes = mergeVotes(s.st.Votes, votes)
		}
	}
	s.awaitAnswersLocked()
}

// Checkpointer returns the capability that saves the conversation before
// every model request: the history with the request about to be sent and
// the background tasks whose outcomes the model has not seen, so that a
// process killed at any line loses at most the step in progress. Put it
// after the BackgroundTools capabilities, so that the outcomes they add to
// the request are saved with it. A failed save ends the run.
func (s *Session) Checkpointer() agent.Capability { return checkpointer{s: s} }

type checkpointer struct{ s *Session }

var (
	_ agent.ModelRequestHook = checkpointer{}
	_ agent.StepRecorder     = checkpointer{}
)

func (c checkpointer) BeforeModelRequest(ctx context.Context, info *agent.RunInfo, req *message.Message) error {
	h := info.History()
	if len(req.Parts) > 0 {
		m := *req
		m.RunID, m.ConversationID = info.RunID, info.ConversationID
		if m.Timestamp.IsZero() {
			m.Timestamp = time.Now().UTC()
		}
		h = append(h, m)
	}
	var rec *deferred.PendingRecord
	if live := background.Live(ctx); len(live) > 0 {
		rec = &deferred.PendingRecord{ConversationID: info.ConversationID, RunID: info.RunID, Tasks: live}
	}
	s := c.s
	s.mu.Lock()
	s.stepped = true
	s.stampQuorum(ctx, rec)
	s.updateLocked(h, rec)
	if tp := telemetry.Traceparent(trace.SpanContextFromContext(ctx)); tp != "" {
		s.st.Trace = tp // the run's span: a continuation links to it
	}
	err := s.saveLocked(ctx)
	s.mu.Unlock()
	if err != nil {
		return err
	}
	s.notifyAside(ctx)
	return nil
}

// RecordStep implements agent.StepRecorder (SPEC §20): the history with
// the model's response being handled, its step record, and the outcomes of
// its calls that ended so far (a request after it) is saved, with the
// background tasks live now added to the pending record; nothing is
// settled and nothing that arrived is taken (the next model request's
// save does that), so that a process killed while the step's calls run
// is continued from the stored response.
func (c checkpointer) RecordStep(ctx context.Context, info *agent.RunInfo, done []message.Part) error {
	h := info.History()
	if len(done) > 0 {
		m := message.NewRequest(done...)
		m.RunID, m.ConversationID, m.Timestamp = info.RunID, info.ConversationID, time.Now().UTC()
		h = append(h, m)
	}
	s := c.s
	live := background.Live(ctx)
	s.mu.Lock()
	s.stepped = true
	s.st.History = h
	s.st.Pending = stepPending(s.st.Pending, live, info)
	s.stampQuorum(ctx, s.st.Pending)
	err := s.saveLocked(ctx)
	s.mu.Unlock()
	return err
}

// stepPending is the pending record saved while a step runs: the tasks
// live now, and the deferred calls of before that block the conversation
// (those a continuation resolves as its step runs), nil when none.
func stepPending(old *deferred.PendingRecord, live []deferred.PendingTask, info *agent.RunInfo) *deferred.PendingRecord {
	tasks := slices.Clone(live)
	if old != nil {
		for _, t := range old.Tasks {
			if !t.Background() && !t.NonBlocking && !slices.ContainsFunc(tasks, func(l deferred.PendingTask) bool { return l.TaskID == t.TaskID }) {
				tasks = append(tasks, t)
			}
		}
	}
	if len(tasks) == 0 {
		return nil
	}
	return &deferred.PendingRecord{ConversationID: info.ConversationID, RunID: info.RunID, Tasks: tasks}
}

// Finish saves what the run left: its history and, when it paused, its
// pending record (announcing the approvals). A run that failed before it
// changed anything leaves the stored state as it was, arrivals included.
func (s *Session) Finish(ctx context.Context, res *agent.Result, runErr error) error {
	if res == nil {
		return nil
	}
	s.awaitNotified() // published in order: the step's before the end's
	s.mu.Lock()
	if runErr != nil && !s.stepped && len(res.Messages) <= len(s.st.History) {
		s.mu.Unlock()
		return nil
	}
	rec := res.PendingRecord()
	s.stampQuorum(ctx, rec)
	s.updateLocked(res.Messages, rec)
	err := s.saveLocked(ctx)
	s.mu.Unlock()
	if err != nil {
		return err
	}
	s.notify(ctx)
	if rec != nil {
		s.announce(ctx, rec)
	}
	return nil
}

// announce publishes the approvals of rec this session has not announced
// yet.
func (s *Session) announce(ctx context.Context, rec *deferred.PendingRecord) {
	if s.cfg.Announcer == nil {
		return
	}
	fresh := &deferred.PendingRecord{ConversationID: rec.ConversationID, RunID: rec.RunID}
	s.mu.Lock()
	for _, t := range rec.Tasks {
		if !s.announced[t.TaskID] {
			fresh.Tasks = append(fresh.Tasks, t)
			s.announced[t.TaskID] = true
		}
	}
	s.mu.Unlock()
	if len(fresh.Tasks) == 0 {
		return
	}
	if err := s.cfg.Announcer.Announce(ctx, fresh); err != nil {
		s.log.WarnContext(ctx, "approvals not announced", slog.Any("error", err))
	}
}

// notifyTimeout bounds the publishes of a notification made aside.
const notifyTimeout = 15 * time.Second

// notifyAside is notify off the run's path (a continuation's first model
// request does not wait for the resolutions of the decisions it applied),
// on a goroutine of the session's, after the one before it: Finish and
// Close wait for them (awaitNotified).
func (s *Session) notifyAside(ctx context.Context) {
	s.mu.Lock()
	if len(s.resolutions) == 0 && len(s.cancels) == 0 {
		s.mu.Unlock()
		return
	}
	before, done := s.notified, make(chan struct{})
	s.notified = done
	s.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), notifyTimeout)
	go func() {
		defer close(done)
		defer cancel()
		if before != nil {
			<-before
		}
		s.notify(ctx)
	}()
}

// awaitNotified waits for the notifications made aside.
func (s *Session) awaitNotified() {
	s.mu.Lock()
	last := s.notified
	s.mu.Unlock()
	if last != nil {
		<-last
	}
}

// notify publishes what applied arrivals owe: resolutions of decided
// approvals, cancels of the workers' copies of answered external calls.
// Failures are logged: the state is saved, and these are courtesies.
func (s *Session) notify(ctx context.Context) {
	s.mu.Lock()
	res, cancels := s.resolutions, s.cancels
	s.resolutions, s.cancels = nil, nil
	s.mu.Unlock()
	for _, r := range res {
		if s.cfg.Announcer == nil {
			break
		}
		if err := s.cfg.Announcer.Resolve(ctx, s.st.ID, r); err != nil {
			s.log.WarnContext(ctx, "resolution not published", slog.String("task_id", r.TaskID), slog.Any("error", err))
		}
	}
	for _, t := range cancels {
		if s.cfg.Canceller == nil {
			break
		}
		if err := s.cfg.Canceller.Cancel(ctx, s.st.ID, t.TaskID, t.Tool, "answered"); err != nil {
			s.log.WarnContext(ctx, "cancel not published", slog.String("task_id", t.TaskID), slog.Any("error", err))
		}
	}
}

// stampQuorum saves with each approval of rec the quorum its tool needs
// (Config.Quorum), unless it has one.
func (s *Session) stampQuorum(ctx context.Context, rec *deferred.PendingRecord) {
	if rec != nil {
		s.stampTasks(ctx, rec.Tasks)
	}
}

// stampTasks stamps each approval of tasks with the quorum its tool
// needs (Config.Quorum) and its timeout (Config.Expiry), unless it has
// them.
func (s *Session) stampTasks(ctx context.Context, tasks []deferred.PendingTask) {
	s.stampExpiry(ctx, tasks)
	if s.cfg.Quorum == nil {
		return
	}
	for i, t := range tasks {
		if t.Kind == deferred.KindApproval && t.Required == 0 {
			if n := s.cfg.Quorum(ctx, t.Tool); n > 1 {
				tasks[i].Required = n
			}
		}
	}
}

// stampExpiry stamps each approval of tasks with its tool's timeout
// (Config.Expiry), unless it has one: what a timeout's decision must be
// to be admitted (conversation.State.Admit).
func (s *Session) stampExpiry(ctx context.Context, tasks []deferred.PendingTask) {
	if s.cfg.Expiry == nil {
		return
	}
	for i, t := range tasks {
		if t.Kind == deferred.KindApproval && t.Expiry == nil {
			tasks[i].Expiry = s.cfg.Expiry(ctx, t.Tool).Expiry()
		}
	}
}

// stampFinal returns the run's event handler next, with the approvals a
// final event lists stamped with their quorum, as the pending record
// saves them (the agent that emits it knows no quorum).
func (s *Session) stampFinal(ctx context.Context, next func(agent.Event)) func(agent.Event) {
	if s.cfg.Quorum == nil || next == nil {
		return next
	}
	return func(e agent.Event) {
		if e.Type == agent.EventFinal && e.Final != nil && len(e.Final.Pending) > 0 {
			f := *e.Final
			f.Pending = slices.Clone(f.Pending)
			s.stampTasks(ctx, f.Pending)
			e.Final = &f
		}
		next(e)
	}
}

// stampAnswers returns the run's event handler next, with the
// tool_result of each external call answered stamped with who answered
// it (agent.Event.Answer: the note AnswerMetaKey records on its tool
// return), so that the run's events say it as the history does.
func (s *Session) stampAnswers(next func(agent.Event)) func(agent.Event) {
	if next == nil {
		return nil
	}
	return func(e agent.Event) {
		if e.Type == agent.EventToolResult {
			s.mu.Lock()
			if n, ok := s.decisions[e.ToolCallID]; ok && n.key == AnswerMetaKey {
				e.Answer = tool.DeepCopy(n.meta)
			}
			s.mu.Unlock()
		}
		next(e)
	}
}

// Pending returns the calls the conversation's pending record lists as
// saved (a paused run's, with their quorums), nil when nothing is
// pending.
func (s *Session) Pending() []deferred.PendingTask {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.st.Pending == nil {
		return nil
	}
	return slices.Clone(s.st.Pending.Tasks)
}

// mergeVotes adds to votes those of more it lacks (one per task and
// identity), in order.
func mergeVotes(votes, more []conversation.Vote) []conversation.Vote {
	for _, v := range more {
		if !slices.ContainsFunc(votes, func(o conversation.Vote) bool { return o.TaskID == v.TaskID && o.By == v.By }) {
			votes = append(votes, v)
		}
	}
	return votes
}
