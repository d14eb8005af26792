package serve

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/offload-dev/offload/pkg/agent"
	"github.com/offload-dev/offload/pkg/conversation"
	"github.com/offload-dev/offload/pkg/message"
	"github.com/offload-dev/offload/pkg/metrics"
	"github.com/offload-dev/offload/pkg/natsjs"
	"github.com/offload-dev/offload/pkg/natsjs/convstore"
	"github.com/offload-dev/offload/pkg/protocol"
	"github.com/offload-dev/offload/pkg/session"
)

// WakeOutcome says what a wake did.
type WakeOutcome int

const (
	// WakeConsumed says the conversation's checkpoint has passed what arrived
	// (recorded, continued, or nothing to do): the message is acked.
	WakeConsumed WakeOutcome = iota
	// WakeContinued says it was consumed, and this replica continues the
	// conversation.
	WakeContinued
	// WakeHeld says another process holds the conversation: try again later.
	WakeHeld
	// WakeMissingAgent says this replica lacks the conversation's agent.
	WakeMissingAgent
)

// onWake handles one wake message on its own goroutine, once a slot of
// Config.Concurrency is free (the consumer's deliveries wait meanwhile):
// parsed by its subject only (headers only), acked once consumed,
// delivered again later otherwise.
func (s *Service) onWake(m jetstream.Msg) {
	conv, marker, err := s.wakeConversation(m.Subject())
	if err != nil {
		s.log.Warn("wake: not a conversation's subject", slog.String("subject", m.Subject()))
		_ = m.Term()
		return
	}
	select {
	case s.wakes <- struct{}{}:
	case <-s.suspend:
		_ = m.Nak()
		return
	}
	if !s.enter() {
		<-s.wakes
		_ = m.Nak()
		return
	}
	var stored time.Time
	delivered := uint64(1)
	if meta, err := m.Metadata(); err == nil {
		stored, delivered = meta.Timestamp, meta.NumDelivered
	}
	go func() {
		defer s.wg.Done()
		out, err := s.wake(s.ctx, conv, stored, marker)
		<-s.wakes
		switch {
		case err != nil:
			s.log.Warn("wake failed; delivered again later", slog.String("conversation_id", conv), slog.Any("error", err))
			_ = m.NakWithDelay(s.cfg.RetryDelay)
		case out == WakeHeld:
			delay := s.heldDelay(conv, delivered)
			s.log.Debug("wake: the conversation is held; delivered again later", slog.String("conversation_id", conv), slog.Duration("delay", delay))
			_ = m.NakWithDelay(delay)
		case out == WakeMissingAgent:
			_ = m.NakWithDelay(s.cfg.MissingDelay)
		default:
			_ = m.Ack()
		}
	}()
}

// wakeConversation returns the conversation a wake message concerns:
// that of a decision, answer or result subject, or of a wake marker
// (marker true).
func (s *Service) wakeConversation(subject string) (conv string, marker bool, err error) {
	if conv, ok := strings.CutPrefix(subject, natsjs.WakeSubject(s.cfg.Provision.Prefix, "")); ok {
		_, err := protocol.ParseID(conv)
		return conv, true, err
	}
	_, conv, _, _, err = protocol.Subjects{Prefix: s.cfg.Provision.Prefix}.Parse(subject)
	return conv, false, err
}

// Wake continues conversation id if what it waits for has arrived and no
// other process holds it: it claims the lease without waiting, records
// what arrived (the checkpoint passes it) and, when every pending
// deferred call has its answer or a background outcome arrived, starts
// the continuation on the service's goroutine.
func (s *Service) Wake(ctx context.Context, id string) (WakeOutcome, error) {
	return s.wake(ctx, id, time.Time{}, false)
}

// wake is Wake for a message stored at stored (zero: unknown), the start
// of the wake latency a continuation observes; a wake marker (a
// hand-over: the conversation may wait for nothing) skips the pending
// record's check.
func (s *Service) wake(ctx context.Context, id string, stored time.Time, marker bool) (WakeOutcome, error) {
	if s.live(id) != nil {
		return WakeHeld, nil
	}
	name := ""
	var lease *convstore.LeaseSeen
	if !marker {
		pc, err := s.precheck(ctx, id)
		if err != nil || pc.decided {
			return pc.out, err
		}
		name, lease = pc.agent, pc.lease
	}
	if name == "" {
		st, _, err := s.cfg.Store.Load(ctx, id)
		if errors.Is(err, conversation.ErrNotFound) {
			return WakeConsumed, nil
		}
		if err != nil {
			return 0, err
		}
		if st.Agent == nil {
			s.log.Debug("wake: the conversation has no agent (not started by agent serve)", slog.String("conversation_id", id))
			return WakeConsumed, nil
		}
		name = st.Agent.Name
	}
	a, ok := s.agents[name]
	if !ok {
		return s.missingAgent(id, name), nil
	}
	if !s.enter() {
		return WakeHeld, nil
	}
	sc := s.sessionConfig(false, a.Name)
	if lease != nil {
		sc.Store = leaseClaim{quickClaim: quickClaim{Store: s.cfg.Store}, seen: *lease} // from the lease the pre-check read
	}
	sess, err := session.Open(ctx, sc, id, false)
	switch {
	case errors.Is(err, conversation.ErrClaimed):
		s.wg.Done()
		return WakeHeld, nil
	case errors.Is(err, conversation.ErrNotFound):
		s.wg.Done()
		return WakeConsumed, nil
	case err != nil:
		s.wg.Done()
		return 0, err
	}
	ro, err := sess.Continue(ctx, session.ContinueOptions{})
	var pe *session.PendingError
	switch {
	case errors.As(err, &pe), errors.Is(err, session.ErrNothingToResume):
		// A marker's conversation (the sweep's: its entry says running)
		// with nothing to continue is a run killed after its end's save
		// and before its status write, or while calls of it waited. Left
		// so, the sweep drops it and it reads running for ever (SPEC §20's
		// first invariant): its status is written as its state says.
		switch {
		case marker && pe != nil:
			sess.RecordPaused()
			s.cfg.Lifecycle.Info("conversation found waiting for its calls: recorded paused", slog.String("conversation_id", id), slog.Int("pending", len(pe.Waiting)))
		case marker:
			sess.RecordEnded()
			s.cfg.Lifecycle.Info("conversation found ended with its status unwritten: recorded finished", slog.String("conversation_id", id))
		}
		s.closeSession(sess)
		s.wg.Done()
		return WakeConsumed, nil
	case err != nil:
		s.closeSession(sess)
		s.wg.Done()
		return 0, err
	}
	if s.cfg.OnContinue != nil {
		s.cfg.OnContinue(id)
	}
	s.cfg.Lifecycle.Info("conversation woken: continuing", slog.String("conversation_id", id), slog.String("agent", a.Name))
	if !stored.IsZero() && s.cfg.Metrics != nil {
		ro.Capabilities = append(ro.Capabilities, &wakeTimer{stored: stored, m: s.cfg.Metrics})
	}
	s.launch(sess, a, "", ro)
	return WakeContinued, nil
}

// missingAgent records that this replica lacks agent name of
// conversation id and says so.
func (s *Service) missingAgent(id, name string) WakeOutcome {
	s.mu.Lock()
	s.missing[id] = name
	s.mu.Unlock()
	s.log.Warn("wake: this replica lacks the conversation's agent; not claimed", slog.String("conversation_id", id), slog.String("agent", name))
	return WakeMissingAgent
}

// wakeTimer observes the wake latency at the continuation's first model
// request.
type wakeTimer struct {
	stored time.Time
	m      *metrics.Serve
	once   sync.Once
}

// BeforeModelRequest implements agent.ModelRequestHook.
func (w *wakeTimer) BeforeModelRequest(context.Context, *agent.RunInfo, *message.Message) error {
	w.once.Do(func() { w.m.Woke(time.Since(w.stored)) })
	return nil
}
