package serve

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/offload-dev/offload/pkg/conversation"
	"github.com/offload-dev/offload/pkg/deferred"
	"github.com/offload-dev/offload/pkg/tool"
)

// errNotPending is checkArgs' error for a call that is not (or no
// longer) pending: the publish that follows says which (404 or 409).
var errNotPending = errors.New("this call is no longer pending")

// errNoPendingReader is pendingCall's error for a handler given neither
// HandlerConfig.Pending nor Inbox: it cannot read what is pending.
var errNoPendingReader = errors.New("this server reads no pending records (HandlerConfig.Pending): the arguments cannot be checked")

// pendingCall returns task of conversation conv as it is pending now
// (nil when it waits for nothing any more).
func (h *handler) pendingCall(ctx context.Context, conv, task string) (*conversation.Summary, *deferred.PendingTask, error) {
	r := h.Pending
	if h.Inbox != nil {
		r = h.Inbox
	}
	if r == nil {
		return nil, nil, errNoPendingReader
	}
	s, err := r.Get(ctx, conv)
	if errors.Is(err, conversation.ErrNotFound) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, err
	}
	for _, t := range s.Tasks {
		if t.TaskID == task {
			return s, &t, nil
		}
	}
	return s, nil, nil
}

// checkArgs checks edited arguments of task against its tool's schema
// (the tool of the conversation's agent on this replica) and returns them
// compact.
func (h *handler) checkArgs(ctx context.Context, conv, task, edited string) (json.RawMessage, error) {
	s, pt, err := h.pendingCall(ctx, conv, task)
	if err != nil {
		return nil, err
	}
	if pt == nil {
		return nil, errNotPending
	}
	a, ok := h.Service.agents[s.Agent]
	if !ok || a.Tools == nil {
		return nil, fmt.Errorf("this replica does not know the schema of %s (agent %q): the arguments cannot be checked", pt.Tool, s.Agent)
	}
	tools, err := a.Tools.Tools(ctx)
	if err != nil {
		return nil, fmt.Errorf("the tools of agent %s: %w", s.Agent, err)
	}
	i := slices.IndexFunc(tools, func(t *tool.Tool) bool { return t.Name == pt.Tool })
	if i < 0 {
		return nil, fmt.Errorf("agent %s offers no tool %s: the arguments cannot be checked", s.Agent, pt.Tool)
	}
	args, err := tools[i].ParseArgs(edited)
	var ve *tool.ValidationError
	if errors.As(err, &ve) {
		return nil, errors.New(argsMessage(ve.Message))
	}
	return args, err
}
