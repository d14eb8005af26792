package serve

import (
	"context"

	"github.com/offload-dev/offload/pkg/conversation"
	"github.com/offload-dev/offload/pkg/deferred"
	"github.com/offload-dev/offload/pkg/message"
	"github.com/offload-dev/offload/pkg/service"
)

// getAttempts bounds the loads of [Service.Get]: a conversation saved
// again between its load and the read of its lease is loaded again.
const getAttempts = 3

// Get returns the view of conversation id (conversation.ErrNotFound for
// an unknown one). Its state and its lease are read one after the other:
// when the state loaded says a run was under way and no process holds
// the lease, the state is loaded again, and a later revision (the run's
// end was saved before its lease was released) is what the view shows
// (issue 38: it briefly said paused, with nothing pending).
func (s *Service) Get(ctx context.Context, id string) (*service.Conversation, error) {
	st, rev, err := s.cfg.Store.Load(ctx, id)
	if err != nil {
		return nil, err
	}
	for attempt := 1; ; attempt++ {
		c, settled := s.view(ctx, id, st)
		if settled || attempt == getAttempts {
			return c, nil
		}
		again, rev2, err := s.cfg.Store.Load(ctx, id)
		if err != nil {
			return nil, err
		}
		if rev2 == rev {
			return c, nil // saved by no one since: no run holds it
		}
		st, rev = again, rev2
	}
}

// view is the view of conversation id whose stored state is st; settled
// is false when st's history waits for the model or a tool and no
// process held its lease when read (a run ended since st was saved, or
// its holder was killed): [Service.Get] loads it again to tell.
func (s *Service) view(ctx context.Context, id string, st *conversation.State) (*service.Conversation, bool) {
	c := &service.Conversation{ConversationID: id, UpdatedAt: st.UpdatedAt, Pending: st.Unresolved(), Output: lastOutput(st.History),
		StartedBy: st.StartedBy, Tenant: st.Tenant}
	if c.Pending == nil {
		c.Pending = []deferred.PendingTask{}
	}
	if st.Agent != nil {
		c.Agent = st.Agent.Name
		if _, ok := s.agents[st.Agent.Name]; !ok {
			c.Note = "this replica lacks agent " + st.Agent.Name + ": it does not continue the conversation"
		}
	}
	switch {
	case s.live(id) != nil:
		c.Status = conversation.StatusRunning
	case len(c.Pending) > 0:
		c.Status = conversation.StatusPaused
	case s.failed(ctx, id, &c.Error):
		c.Status = conversation.StatusFailed
	case ended(st.History) && (st.Pending == nil || len(st.Pending.Tasks) == 0):
		// (A pending record whose calls all have their outcome is a
		// conversation about to be continued: the model ended its turn
		// with non-blocking calls pending, SPEC §12.)
		c.Status = conversation.StatusFinished
	case s.heldElsewhere(ctx, id):
		// Its history waits for the model or a tool, and a run of it is
		// live on some replica.
		c.Status = conversation.StatusRunning
	default:
		// Its history waits for the model or a tool, and no process holds
		// it (its holder was killed): as the list says, paused, until a
		// replica (or agent resume) continues it.
		c.Status = conversation.StatusPaused
		if c.Note == "" {
			c.Note = "no process holds it: its last run stopped before its end; a replica continues it"
		}
		return c, false
	}
	return c, true
}

// heldElsewhere reports whether a process holds conversation id's lease
// (true when it cannot be read).
func (s *Service) heldElsewhere(ctx context.Context, id string) bool {
	lease, err := s.cfg.Store.ReadLease(ctx, id)
	return err != nil || lease.Held
}

// failed reports whether the status index says conversation id's last
// run failed, setting *why to its error as recorded.
func (s *Service) failed(ctx context.Context, id string, why *string) bool {
	st, err := s.cfg.Store.GetStatus(ctx, id)
	if err != nil || st == nil || st.Status != conversation.StatusFailed {
		return false
	}
	*why = st.Error
	return true
}

// State returns the stored state of conversation id
// (conversation.ErrNotFound for an unknown one).
func (s *Service) State(ctx context.Context, id string) (*conversation.State, error) {
	st, _, err := s.cfg.Store.Load(ctx, id)
	return st, err
}

// ended reports whether h ends with a model response that calls no tool.
func ended(h message.History) bool {
	if len(h) == 0 || h[len(h)-1].Role != message.RoleResponse {
		return false
	}
	for _, p := range h[len(h)-1].Parts {
		if _, ok := p.(message.ToolCall); ok {
			return false
		}
	}
	return true
}

// lastOutput is the text of the last model response of h.
func lastOutput(h message.History) string {
	for i := len(h) - 1; i >= 0; i-- {
		if h[i].Role != message.RoleResponse {
			continue
		}
		var out string
		for _, p := range h[i].Parts {
			if t, ok := p.(message.Text); ok {
				out += t.Content
			}
		}
		return out
	}
	return ""
}
