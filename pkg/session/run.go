package session

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/offload-dev/offload/pkg/agent"
	"github.com/offload-dev/offload/pkg/conversation"
	"github.com/offload-dev/offload/pkg/deferred"
	"github.com/offload-dev/offload/pkg/protocol"
	"github.com/offload-dev/offload/pkg/telemetry"
)

// Given is an answer given by hand for a pending call (on a command line,
// in an API request): a decision or an answer of SPEC §5.2, admitted
// exactly as one read from the wire.
type Given struct {
	// Kind is conversation.ArrivalDecision or conversation.ArrivalAnswer.
	Kind conversation.ArrivalKind
	// TaskID is the pending call's task ID.
	TaskID string
	// Data is the Decision or the Answer.
	Data []byte
}

// GivenError is the error of [Session.Continue] for an answer given by hand
// that was refused (other than as a duplicate, which is ignored): Index is
// its place among the answers given, Err the refusal (a
// *conversation.RefusedError) or the store's error.
type GivenError struct {
	Index int
	Given Given
	Err   error
}

// Error implements error.
func (e *GivenError) Error() string {
	return fmt.Sprintf("session: answer for task %s refused: %v", e.Given.TaskID, e.Err)
}

// Unwrap returns Err.
func (e *GivenError) Unwrap() error { return e.Err }

// PendingError is the error of [Session.Continue] while deferred calls
// still wait for their answers: the conversation stays paused, what arrived
// is saved.
type PendingError struct {
	// Waiting are the deferred calls without an answer.
	Waiting []deferred.PendingTask
}

// Error implements error.
func (e *PendingError) Error() string {
	return fmt.Sprintf("session: %d pending calls wait for an answer", len(e.Waiting))
}

// ContinueOptions configure [Session.Continue].
type ContinueOptions struct {
	// Given are answers given by hand, admitted after what arrived on the
	// wire.
	Given []Given
	// OnDuplicate, if set, is told of a given answer refused as a
	// duplicate (first wins): it is ignored.
	OnDuplicate func(i int, g Given, err *conversation.RefusedError)
	// Wait, when positive, is how long to wait for the answers the
	// deferred calls still need (see [Session.AwaitArrivals]); suspend
	// ends the wait.
	Wait    time.Duration
	Suspend <-chan struct{}
	// Prompt is the new user prompt, if any.
	Prompt string
}

// Continue records what arrived for the conversation (from the streams,
// then co.Given) and saves it, waits for the rest when co.Wait says so,
// and, once every pending deferred call has its answer, returns the
// options of the run that continues the conversation (see
// [Session.Prepare]). While calls still wait it returns a [*PendingError]
// (nothing else changes: a prompt given meanwhile is recorded nowhere); a
// refused given answer is a [*GivenError] (the answers before it stay
// recorded; one whose task ID is no ULID wraps protocol.ErrInvalidID); a
// conversation with nothing to resume is ErrNothingToResume.
func (s *Session) Continue(ctx context.Context, co ContinueOptions) (*agent.RunOptions, error) {
	if _, err := s.Collect(ctx); err != nil {
		return nil, fmt.Errorf("read decisions and answers: %w", err)
	}
	for i, g := range co.Given {
		_, err := protocol.ParseID(g.TaskID)
		if err == nil {
			err = s.Admit(g.Kind, g.TaskID, g.Data)
		}
		var re *conversation.RefusedError
		switch {
		case err == nil:
		case errors.As(err, &re) && re.Reason == conversation.ReasonDuplicate:
			if co.OnDuplicate != nil {
				co.OnDuplicate(i, g, re)
			}
		default:
			_ = s.Save(ctx) // what was given before it stays recorded
			return nil, &GivenError{Index: i, Given: g, Err: err}
		}
	}
	// What Collect read is saved already: a second save only for the
	// answers given by hand (a wake gives none: one save before its
	// continuation's first model request, the wake latency).
	if len(co.Given) > 0 {
		if err := s.Save(ctx); err != nil {
			return nil, err
		}
	}
	if co.Wait > 0 && len(s.Waiting()) > 0 {
		if err := s.AwaitArrivals(ctx, co.Wait, co.Suspend); err != nil {
			return nil, err
		}
	}
	if w := s.Waiting(); len(w) > 0 {
		return nil, &PendingError{Waiting: w}
	}
	return s.Prepare(co.Prompt)
}

// NotSavedError is the error of [Session.Run] when what the run left could
// not be saved although it ended by itself: Err says why (wrapping
// conversation.ErrLeaseLost when another process may hold the
// conversation now; nothing more was saved then).
type NotSavedError struct {
	ID  string
	Err error
}

// Error implements error.
func (e *NotSavedError) Error() string {
	if errors.Is(e.Err, conversation.ErrLeaseLost) {
		return fmt.Sprintf("conversation %s: %v (another process may have claimed it); nothing more was saved", e.ID, e.Err)
	}
	return fmt.Sprintf("conversation %s not saved: %v", e.ID, e.Err)
}

// Unwrap returns Err.
func (e *NotSavedError) Unwrap() error { return e.Err }

// Timeouts of the save that ends a run: the store's server may be gone,
// and a save can then only wait out its timeout.
const (
	finishTimeout      = 15 * time.Second
	finishTimeoutNoNet = 2 * time.Second
)

// Run runs a on the conversation (SPEC §5.5): the conversation is saved
// before every model request ([Session.Checkpointer], added as the run's
// last capability), the run stops when the lease is lost,
// and what the run left is saved at its end ([Session.Finish]; for at most
// 15 s, 2 s when Config.Connected says the store's server is gone). opts
// are the run's options (those of [Session.Continue] to continue it). It
// returns the run's result and error; when the run ended by itself but
// its end could not be saved, or the lease was lost, the error is a
// [*NotSavedError] (a save that failed after a failed run is logged).
// When the store keeps a status index ([StatusRecorder]), the run records
// running at its start and its outcome ([StatusOf]) at its end.
func (s *Session) Run(ctx context.Context, a *agent.Agent, prompt string, opts *agent.RunOptions) (res *agent.Result, err error) {
	// Stored before the run does anything (a continuation may run an
	// approved call before its first model request): a process killed at
	// any line after it leaves the status running and its lease lapsing,
	// what agent serve's sweep continues.
	s.recordStatus(conversation.StatusRunning)
	ro := agent.RunOptions{}
	if opts != nil {
		ro = *opts
	}
	// The final event is told last, once what it says is stored (the
	// state, the pending record, the status): a face that reads the
	// store on it finds the pause it names.
	var held heldFinal
	ro.OnEvent = held.wrap(s.stampAnswers(s.stampFinal(ctx, ro.OnEvent)))
	defer held.emit()
	defer func() { s.recordEnd(res, withCause(ctx, err)) }()
	ro.ConversationID = s.ID()
	ro.Tenant, ro.Agent = s.tenantAndAgent()
	if !ro.Continues.IsValid() {
		s.mu.Lock()
		ro.Continues = telemetry.ParseTraceparent(s.st.Trace) // the run that saved last, when traced
		s.mu.Unlock()
	}
	// Last: it saves the request the capabilities before it prepared.
	ro.Capabilities = append(slices.Clone(ro.Capabilities), s.Checkpointer())
	runCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	go func() {
		select {
		case <-s.Lost():
			cancel(conversation.ErrLeaseLost)
		case <-runCtx.Done():
		}
	}()
	res, runErr := a.Run(runCtx, prompt, &ro)
	if errors.Is(context.Cause(runCtx), conversation.ErrLeaseLost) {
		// Another process may hold the conversation now: nothing is saved
		// (Finish would refuse), and the run did not end by itself.
		return res, &NotSavedError{ID: s.ID(), Err: conversation.ErrLeaseLost}
	}
	saveFor := finishTimeout
	if s.cfg.Connected != nil && !s.cfg.Connected() {
		saveFor = finishTimeoutNoNet
	}
	fctx, fcancel := context.WithTimeout(context.WithoutCancel(ctx), saveFor)
	defer fcancel()
	if err := s.Finish(fctx, res, runErr); err != nil {
		s.log.Error("conversation not saved", slog.Any("error", err))
		if runErr == nil {
			return res, &NotSavedError{ID: s.ID(), Err: err}
		}
	}
	return res, runErr
}

// withCause is err, a run's error, with what interrupted it when it was
// cancelled with a cause (agent serve's cancel: service.ErrCancelled):
// the status index says why a person sees the run failed, not only
// "context canceled".
func withCause(ctx context.Context, err error) error {
	if err == nil || !errors.Is(err, context.Canceled) {
		return err
	}
	// Identity, not errors.Is: a cause such as service.ErrCancelled is
	// context.Canceled by errors.Is, and is what is wanted.
	if cause := context.Cause(ctx); cause != nil && cause != context.Canceled && !errors.Is(err, cause) { //nolint:errorlint // identity: any cause but the bare context.Canceled
		return fmt.Errorf("%w: %w", cause, err)
	}
	return err
}

// heldFinal holds a run's final event back until emit, passing every
// other event on at once.
type heldFinal struct {
	mu    sync.Mutex
	next  func(agent.Event)
	final *agent.Event
}

// wrap returns next with the final event held (nil for a nil next).
func (h *heldFinal) wrap(next func(agent.Event)) func(agent.Event) {
	if next == nil {
		return nil
	}
	h.next = next
	return func(e agent.Event) {
		if e.Type == agent.EventFinal {
			h.mu.Lock()
			h.final = &e
			h.mu.Unlock()
			return
		}
		next(e)
	}
}

// emit tells the final event held, if any.
func (h *heldFinal) emit() {
	h.mu.Lock()
	f := h.final
	h.final = nil
	h.mu.Unlock()
	if f != nil {
		h.next(*f)
	}
}
