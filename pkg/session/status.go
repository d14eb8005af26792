package session

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/offload-dev/offload/pkg/agent"
	"github.com/offload-dev/offload/pkg/conversation"
)

// StatusRecorder is a store that keeps the status index of its
// conversations (convstore.Store): what `agent serve` lists and counts
// without loading a history. [Session.Run] records a conversation's
// status there while it holds the lease, whoever runs it (agent run,
// agent resume, agent serve): running at its start, its outcome at its
// end.
type StatusRecorder interface {
	RecordStatus(ctx context.Context, id, agent, status string) error
}

// FailureRecorder is a StatusRecorder that also keeps why a run failed
// (convstore.Store): [Session.Run] records a failed run's error text with
// it, what GET /v1/conversations/{id} shows.
type FailureRecorder interface {
	RecordFailure(ctx context.Context, id, agent, errText string) error
}

// StatusSetter is a StatusRecorder that keeps a whole
// conversation.Status (convstore.Store): [Session.Run] records with it,
// when the store has it, who started the conversation (State.StartedBy)
// besides its status and a failed run's error.
type StatusSetter interface {
	SetStatus(ctx context.Context, st conversation.Status) error
}

// statusTimeout bounds a write of the status index.
const statusTimeout = 5 * time.Second

// recordStatus writes the conversation's status in the store's index,
// when the store keeps one; a failure is logged (the next run's write
// repairs it).
func (s *Session) recordStatus(status string) {
	s.recordStatusErr(status, nil)
}

// recordStatusErr is recordStatus, with runErr's text for a failed run
// when the store keeps it (FailureRecorder).
func (s *Session) recordStatusErr(status string, runErr error) {
	rec, ok := s.cfg.Store.(StatusRecorder)
	if !ok {
		return
	}
	s.mu.Lock()
	name := ""
	if s.st.Agent != nil {
		name = s.st.Agent.Name
	}
	startedBy := s.st.StartedBy
	s.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), statusTimeout)
	defer cancel()
	var err error
	ss, whole := rec.(StatusSetter)
	switch {
	case whole:
		entry := conversation.Status{ConversationID: s.ID(), Agent: name, Status: status, StartedBy: startedBy}
		if status == conversation.StatusFailed && runErr != nil {
			entry.Error = runErr.Error()
		}
		err = ss.SetStatus(ctx, entry)
	case status == conversation.StatusFailed && runErr != nil && isFailureRecorder(rec):
		err = rec.(FailureRecorder).RecordFailure(ctx, s.ID(), name, runErr.Error())
	default:
		err = rec.RecordStatus(ctx, s.ID(), name, status)
	}
	if err != nil {
		s.log.Warn("status not recorded", slog.String("status", status), slog.Any("error", err))
	}
}

// isFailureRecorder reports whether rec keeps a failed run's error.
func isFailureRecorder(rec StatusRecorder) bool {
	_, ok := rec.(FailureRecorder)
	return ok
}

// StatusOf is the status of a conversation whose run returned res and
// err: failed on an error, paused while calls are pending or the run was
// suspended, finished otherwise.
func StatusOf(res *agent.Result, err error) string {
	switch {
	case err != nil:
		return conversation.StatusFailed
	case res != nil && res.Paused():
		return conversation.StatusPaused
	default:
		return conversation.StatusFinished
	}
}

// recordEnd writes the status of the run's end, while the lease is still
// held (no later run's status is replaced); nothing when the lease was
// lost: another process may run the conversation now.
func (s *Session) recordEnd(res *agent.Result, err error) {
	if errors.Is(err, conversation.ErrLeaseLost) {
		return
	}
	s.recordStatusErr(StatusOf(res, err), err)
}

// RecordEnded records, in the store's status index, that the conversation
// has ended (finished) as its stored state says: the repair of a run whose
// end was saved but whose status write was lost (its process killed
// between the two), which agent serve's sweep of the lapsed runs finds
// still running with nothing to resume (Continue's ErrNothingToResume).
func (s *Session) RecordEnded() { s.recordStatus(conversation.StatusFinished) }

// RecordPaused records, in the store's status index, that the conversation
// waits for its pending calls (paused), as its stored state says: the
// repair of a run killed while calls of it waited, whose entry the sweep
// of the lapsed runs finds running with nothing to continue until they are
// answered (Continue's PendingError).
func (s *Session) RecordPaused() { s.recordStatus(conversation.StatusPaused) }
