package serve

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/offload-dev/offload/pkg/agent"
	"github.com/offload-dev/offload/pkg/conversation"
	"github.com/offload-dev/offload/pkg/natsjs"
	"github.com/offload-dev/offload/pkg/protocol"
	"github.com/offload-dev/offload/pkg/service"
	"github.com/offload-dev/offload/pkg/session"
)

// liveRun is a run of a conversation live on this replica.
type liveRun struct {
	*service.Run
	agent  string                  // its agent's name
	cancel context.CancelCauseFunc // interrupts the run (Service.Cancel)
}

// StartConversation starts a run of agent name on prompt: a new
// conversation, or the stored conversation id (one with nothing pending)
// when id is set. It returns once the conversation is claimed and
// recorded; the run goes on on the service's goroutine.
func (s *Service) StartConversation(ctx context.Context, name, prompt, id string) (*service.Run, error) {
	return s.startRun(ctx, name, prompt, id, id == "", true)
}

// StartThread starts a run of agent name on prompt in conversation id:
// created with that ID when the store holds none (a protocol face's
// thread, SPEC §18), else continued as [Service.Continue] does
// (service.ErrOtherAgent when it records another agent). Its claim does
// not wait: two requests creating the same conversation at once are one
// run and a *conversation.ClaimedError.
func (s *Service) StartThread(ctx context.Context, name, prompt, id string) (*service.Run, error) {
	st, _, err := s.cfg.Store.Load(ctx, id)
	switch {
	case errors.Is(err, conversation.ErrNotFound):
		return s.startRun(ctx, name, prompt, id, true, false)
	case err != nil:
		return nil, err
	case st.Agent == nil || st.Agent.Name != name:
		return nil, fmt.Errorf("%w: conversation %s is not agent %s's", service.ErrOtherAgent, id, name)
	}
	return s.Continue(ctx, id, prompt)
}

// Continue starts a run of stored conversation id, one with nothing
// pending, on prompt, with the agent it records: its claim does not wait
// for another holder (a *conversation.ClaimedError while a run of it is
// live), a conversation with calls pending is a *session.PendingError.
func (s *Service) Continue(ctx context.Context, id, prompt string) (*service.Run, error) {
	st, _, err := s.cfg.Store.Load(ctx, id)
	if err != nil {
		return nil, err
	}
	if t := service.Tenant(ctx); t != "" && st.Tenant != t {
		return nil, &session.TenantError{ID: id, Tenant: t} // said before whether it runs
	}
	if st.Agent == nil {
		return nil, fmt.Errorf("%w: %s", service.ErrNoAgent, id)
	}
	if s.live(id) != nil {
		return nil, &conversation.ClaimedError{ID: id, Holder: s.cfg.Holder, Until: time.Now().Add(conversation.LeaseTTL)}
	}
	return s.startRun(ctx, st.Agent.Name, prompt, id, false, false)
}

// startRun is StartConversation: a new conversation when create is set
// (of ID id when given), its claim waiting for another holder when wait
// is set.
func (s *Service) startRun(ctx context.Context, name, prompt, id string, create, wait bool) (*service.Run, error) {
	a, ok := s.agents[name]
	if !ok {
		return nil, fmt.Errorf("%w: %q", service.ErrUnknownAgent, name)
	}
	if id == "" {
		id = protocol.NewID()
	}
	if !s.enter() {
		return nil, service.ErrClosed
	}
	sc := s.sessionConfig(wait, a.Name)
	sc.StartedBy = service.StartedBy(ctx)
	sc.Tenant = service.Tenant(ctx) // a stored conversation must have it
	if create {
		sc.Tenant = cmp.Or(sc.Tenant, a.Tenant)
	}
	sess, err := session.Open(ctx, sc, id, create)
	if err != nil {
		s.wg.Done()
		return nil, err
	}
	if create && len(sess.State().History) > 0 {
		// Created meanwhile by another request, whose run has ended.
		s.closeSession(sess)
		s.wg.Done()
		return nil, &conversation.ClaimedError{ID: id, Holder: "another request", Until: time.Now()}
	}
	opts := &agent.RunOptions{}
	if !create {
		ro, err := sess.Continue(ctx, session.ContinueOptions{Prompt: prompt})
		if err != nil {
			s.closeSession(sess)
			s.wg.Done()
			return nil, err
		}
		opts = ro
	}
	if err := sess.SetAgent(ctx, conversation.AgentRef{Name: a.Name, Digest: a.Digest}); err != nil {
		s.closeSession(sess)
		s.wg.Done()
		return nil, err
	}
	if tools, ok := service.FrontendTools(ctx); ok {
		if err := sess.SetFrontendTools(ctx, tools); err != nil {
			s.closeSession(sess)
			s.wg.Done()
			return nil, err
		}
	}
	run := s.launch(sess, a, prompt, opts)
	what := "conversation started"
	if !create {
		what = "conversation continued with a prompt"
	}
	s.cfg.Lifecycle.Info(what, slog.String("conversation_id", id), slog.String("agent", a.Name), slog.String("run_id", run.ID))
	return run, nil
}

// launch runs a on the claimed session sess on a goroutine of the service
// (registered with enter by the caller), releasing the session at its end.
func (s *Service) launch(sess *session.Session, a Agent, prompt string, opts *agent.RunOptions) *service.Run {
	ctx, cancel := context.WithCancelCause(s.ctx)
	run, finish := service.NewRun(sess.ID(), protocol.NewID())
	r := &liveRun{Run: run, agent: a.Name, cancel: cancel}
	s.mu.Lock()
	s.runs[r.ConversationID] = r
	s.mu.Unlock()
	opts.Suspend = s.suspend
	opts.RunID = run.ID // the events carry the run ID the API answered
	events := &runEvents{s: s}
	opts.OnEvent = events.publish
	// Non-blocking calls are waited for by the session: their decisions
	// arriving while the run is live are injected without a pause.
	opts.Capabilities = append(opts.Capabilities, sess.NonBlockingCalls(a.NonBlocking))
	// The frontend's tools (SPEC §18), as the conversation stores them.
	opts.Capabilities = append(opts.Capabilities, sess.FrontendTools())
	go func() {
		defer s.wg.Done()
		defer cancel(nil)
		// The session records the status index's running and outcome
		// while it holds the lease (session.Run).
		res, err := sess.Run(ctx, a.Agent, prompt, opts)
		events.wait() // the run is done once its events are stored
		if cause := context.Cause(ctx); err != nil && errors.Is(err, context.Canceled) && errors.Is(cause, service.ErrCancelled) {
			err = fmt.Errorf("%w: %w", cause, err) // what interrupted it, in its final event
		}
		final := finalOf(r.Run, res, err, sess)
		// No longer live here before the release: a wake of the
		// re-check's marker on this replica claims it (the lease tells
		// the others).
		s.mu.Lock()
		if s.runs[r.ConversationID] == r {
			delete(s.runs, r.ConversationID)
		}
		s.mu.Unlock()
		s.closeSession(sess)
		s.logEnd(final, err == nil && res.Suspended)
		if err == nil && res.Suspended {
			s.handOver(r.ConversationID)
		}
		if s.cfg.OnFinal != nil {
			s.cfg.OnFinal(final)
		}
		finish(final) // Done last, as before: OnFinal has been told
	}()
	return run
}

// logEnd says how a run ended (Config.Lifecycle): paused, finished or
// failed; a run suspended to be handed over says so.
func (s *Service) logEnd(f service.Final, suspended bool) {
	attrs := []any{slog.String("conversation_id", f.ConversationID), slog.String("run_id", f.RunID)}
	switch {
	case suspended:
		s.cfg.Lifecycle.Info("conversation suspended: handed over to another replica", attrs...)
	case f.Status == conversation.StatusPaused:
		tasks := make([]string, 0, len(f.Pending))
		for _, t := range f.Pending {
			tasks = append(tasks, string(t.Kind)+" "+t.Tool+" "+t.TaskID)
		}
		s.cfg.Lifecycle.Info("conversation paused", append(attrs, slog.Int("waiting", len(f.Pending)), slog.Any("calls", tasks))...)
	case f.Status == conversation.StatusFailed:
		s.cfg.Lifecycle.Warn("conversation failed", append(attrs, slog.String("error", f.Error))...)
	default:
		s.cfg.Lifecycle.Info("conversation finished", attrs...)
	}
}

// closeSession ends this replica's hold on sess's conversation: it stops
// reading the conversation's results (Config.Unfollow), then releases
// the lease; in that order, so that no other run of it (here or
// elsewhere) has begun reading them meanwhile. Then it re-checks what
// arrived past the session's reads (recheck).
func (s *Service) closeSession(sess *session.Session) {
	if s.cfg.Unfollow != nil {
		s.cfg.Unfollow(sess.ID())
	}
	sess.Close()
	s.recheck(sess)
}

// handOver publishes the wake marker of conversation id, suspended by
// Close or completed by what arrived while its run ended (recheck), so
// that a replica continues it (now, or when one starts) whether or not
// anything is pending; its lease is released already.
func (s *Service) handOver(id string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(s.ctx), 5*time.Second)
	defer cancel()
	if _, err := s.cfg.JetStream.Publish(ctx, natsjs.WakeSubject(s.cfg.Provision.Prefix, id), nil); err != nil {
		s.log.Error("hand-over: wake marker not published; the conversation waits for its next message", slog.String("conversation_id", id), slog.Any("error", err))
		return
	}
	s.log.Info("handed over", slog.String("conversation_id", id))
}

// finalOf is the Final of a run of sess that returned res and err; a
// paused run's calls as sess saved them (with their quorums).
func finalOf(r *service.Run, res *agent.Result, err error, sess *session.Session) service.Final {
	f := service.Final{ConversationID: r.ConversationID, RunID: r.ID}
	switch {
	case err != nil:
		f.Status, f.Error = conversation.StatusFailed, err.Error()
	case res.Paused():
		f.Status, f.Pending = conversation.StatusPaused, sess.Pending()
	default:
		f.Status, f.Output = conversation.StatusFinished, res.Output
	}
	return f
}

// live returns the live run of conversation id on this replica, if any.
func (s *Service) live(id string) *liveRun {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.runs[id]
}
