package serve

import (
	"context"
	"time"

	"github.com/offload-dev/offload/pkg/deferred"
	"github.com/offload-dev/offload/pkg/message"
)

// Conversation is what GET /v1/conversations/{id} shows of a stored
// conversation (SPEC §11).
type Conversation struct {
	ConversationID string `json:"conversation_id"`
	// Agent is the name of the conversation's agent ("" for one not
	// started by agent serve).
	Agent string `json:"agent"`
	// Status is "paused" (calls pending), "failed" (its last run ended
	// with an error), "finished" (its history ends with the model's
	// answer), "running" (a run of it is live) or "paused" also when its
	// history waits for the model or a tool but no process holds it.
	Status string `json:"status"`
	// Pending are the calls it waits for, nothing arrived for them yet.
	Pending []deferred.PendingTask `json:"pending"`
	// Output is the text of the last model response.
	Output    string    `json:"output"`
	UpdatedAt time.Time `json:"updated_at"`
	// Note says why this replica does not continue it, when it lacks its
	// agent.
	Note string `json:"note,omitempty"`
	// Error, for a failed one, says why its last run failed.
	Error string `json:"error,omitempty"`
}

// Get returns the view of conversation id (conversation.ErrNotFound for
// an unknown one).
func (s *Service) Get(ctx context.Context, id string) (*Conversation, error) {
	st, _, err := s.cfg.Session.Store.Load(ctx, id)
	if err != nil {
		return nil, err
	}
	c := &Conversation{ConversationID: id, UpdatedAt: st.UpdatedAt, Pending: st.Unresolved(), Output: lastOutput(st.History)}
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
		c.Status = StatusRunning
	case len(c.Pending) > 0:
		c.Status = StatusPaused
	case s.failed(ctx, id, &c.Error):
		c.Status = StatusFailed
	case ended(st.History) && (st.Pending == nil || len(st.Pending.Tasks) == 0):
		// (A pending record whose calls all have their outcome is a
		// conversation about to be continued: the model ended its turn
		// with non-blocking calls pending, SPEC §12.)
		c.Status = StatusFinished
	case s.heldElsewhere(ctx, id):
		// Its history waits for the model or a tool, and a run of it is
		// live on some replica.
		c.Status = StatusRunning
	default:
		// Its history waits for the model or a tool, and no process holds
		// it (its holder was killed): as the list says, paused.
		c.Status = StatusPaused
	}
	return c, nil
}

// heldElsewhere reports whether a process holds conversation id's lease
// (true when the store cannot tell).
func (s *Service) heldElsewhere(ctx context.Context, id string) bool {
	sr, ok := s.cfg.Session.Store.(summaryReader)
	if !ok {
		return true
	}
	lease, err := sr.ReadLease(ctx, id)
	return err != nil || lease.Held
}

// failed reports whether the status index says conversation id's last
// run failed, setting *why to its error as recorded.
func (s *Service) failed(ctx context.Context, id string, why *string) bool {
	si := s.index()
	if si == nil {
		return false
	}
	st, err := si.GetStatus(ctx, id)
	if err != nil || st == nil || st.Status != StatusFailed {
		return false
	}
	*why = st.Error
	return true
}

// History returns the stored history of conversation id
// (conversation.ErrNotFound for an unknown one).
func (s *Service) History(ctx context.Context, id string) (message.History, error) {
	st, _, err := s.cfg.Session.Store.Load(ctx, id)
	if err != nil {
		return nil, err
	}
	return st.History, nil
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
