package serve

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/offload-dev/offload/pkg/agent"
	"github.com/offload-dev/offload/pkg/conversation"
	"github.com/offload-dev/offload/pkg/deferred"
	"github.com/offload-dev/offload/pkg/natsjs"
	"github.com/offload-dev/offload/pkg/protocol"
	"github.com/offload-dev/offload/pkg/session"
)

// ErrUnknownAgent is returned by [Service.Start] for an agent this
// replica does not serve.
var ErrUnknownAgent = errors.New("serve: unknown agent")

// ErrClosed is returned by [Service.Start] once [Service.Close] has begun.
var ErrClosed = errors.New("serve: closed")

// Final is how a run ended: the §6.3 final event's information.
type Final struct {
	// ConversationID is the conversation.
	ConversationID string `json:"conversation_id"`
	// RunID identifies the run.
	RunID string `json:"run_id"`
	// Status is "finished", "paused" or "failed".
	Status string `json:"status"`
	// Output is the final text of a finished run.
	Output string `json:"output,omitempty"`
	// Pending are the calls a paused run waits for.
	Pending []deferred.PendingTask `json:"pending,omitempty"`
	// Error says why a run failed.
	Error string `json:"error,omitempty"`
}

// Run is a live run of a conversation on this replica.
type Run struct {
	// ConversationID is the conversation.
	ConversationID string
	// ID identifies the run.
	ID    string
	agent string // its agent's name
	done  chan struct{}
	final Final
}

// Done is closed when the run has ended and its state is saved.
func (r *Run) Done() <-chan struct{} { return r.done }

// Final returns how the run ended; valid once Done is closed.
func (r *Run) Final() Final { return r.final }

// Start starts a run of agent name on prompt: a new conversation, or the
// stored conversation id (one with nothing pending) when id is set. It
// returns once the conversation is claimed and recorded; the run goes on
// on the service's goroutine.
func (s *Service) Start(ctx context.Context, name, prompt, id string) (*Run, error) {
	a, ok := s.agents[name]
	if !ok {
		return nil, fmt.Errorf("%w: %q", ErrUnknownAgent, name)
	}
	create := id == ""
	if create {
		id = protocol.NewID()
	}
	if !s.enter() {
		return nil, ErrClosed
	}
	sess, err := session.Open(ctx, s.sessionConfig(true, a.Name), id, create)
	if err != nil {
		s.wg.Done()
		return nil, err
	}
	opts := &agent.RunOptions{}
	if !create {
		ro, err := sess.Continue(ctx, session.ContinueOptions{Prompt: prompt})
		if err != nil {
			sess.Close()
			s.wg.Done()
			return nil, err
		}
		opts = ro
	}
	if err := sess.SetAgent(ctx, conversation.AgentRef{Name: a.Name, Digest: a.Digest}); err != nil {
		sess.Close()
		s.wg.Done()
		return nil, err
	}
	return s.launch(sess, a, prompt, opts), nil
}

// launch runs a on the claimed session sess on a goroutine of the service
// (registered with enter by the caller), releasing the session at its end.
func (s *Service) launch(sess *session.Session, a Agent, prompt string, opts *agent.RunOptions) *Run {
	r := &Run{ConversationID: sess.ID(), ID: protocol.NewID(), agent: a.Name, done: make(chan struct{})}
	s.mu.Lock()
	s.runs[r.ConversationID] = r
	s.mu.Unlock()
	opts.Suspend = s.suspend
	opts.OnEvent = s.publishEvent
	go func() {
		defer s.wg.Done()
		defer close(r.done)
		defer func() {
			s.mu.Lock()
			delete(s.runs, r.ConversationID)
			s.mu.Unlock()
		}()
		res, err := sess.Run(s.ctx, a.Agent, prompt, opts)
		sess.Close()
		r.final = finalOf(r, res, err)
		s.log.Info("run ended", slog.String("conversation_id", r.ConversationID), slog.String("status", r.final.Status))
		if err == nil && res.Suspended {
			s.handOver(r.ConversationID)
		}
		if s.cfg.OnFinal != nil {
			s.cfg.OnFinal(r.final)
		}
	}()
	return r
}

// handOver publishes the wake marker of conversation id, suspended by
// Close, so that another replica continues it (now, or when one starts)
// whether or not anything is pending; its lease is released already.
func (s *Service) handOver(id string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(s.ctx), 5*time.Second)
	defer cancel()
	if _, err := s.cfg.JetStream.Publish(ctx, natsjs.WakeSubject(s.cfg.Provision.Prefix, id), nil); err != nil {
		s.log.Error("hand-over: wake marker not published; the conversation waits for its next message", slog.String("conversation_id", id), slog.Any("error", err))
		return
	}
	s.log.Info("handed over", slog.String("conversation_id", id))
}

// finalOf is the Final of a run that returned res and err.
func finalOf(r *Run, res *agent.Result, err error) Final {
	f := Final{ConversationID: r.ConversationID, RunID: r.ID}
	switch {
	case err != nil:
		f.Status, f.Error = "failed", err.Error()
	case res.Paused():
		f.Status = "paused"
		if rec := res.PendingRecord(); rec != nil {
			f.Pending = rec.Tasks
		}
	default:
		f.Status, f.Output = "finished", res.Output
	}
	return f
}

// live returns the live run of conversation id on this replica, if any.
func (s *Service) live(id string) *Run {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.runs[id]
}
