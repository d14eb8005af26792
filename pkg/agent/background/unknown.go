package background

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/offload-dev/offload/pkg/agent"
	"github.com/offload-dev/offload/pkg/deferred"
	"github.com/offload-dev/offload/pkg/message"
	"github.com/offload-dev/offload/pkg/tool"
)

// A background call whose worker stopped while running it, for a tool not
// declared idempotent, ends with an unknown effect (SPEC §13): its worker
// answers ApprovalRequired with metadata offload.effect "unknown" rather
// than run it again. Like an inline call's, it reaches a person: the task
// becomes a non-blocking approval (SPEC §12) while the run goes on;
// approved, the call runs again as its task's next attempt; denied, the
// model is told that its outcome is unknown.

// unknownEffectOf returns the metadata of err when it is an unknown
// effect.
func unknownEffectOf(err error) (map[string]any, bool) {
	ar, ok := errors.AsType[*tool.ApprovalRequired](err)
	if !ok {
		return nil, false
	}
	v, _ := ar.Metadata[tool.EffectMetaKey].(string)
	return ar.Metadata, v == tool.EffectUnknown
}

// anyWaiter returns the waiter of the first capability of the run that
// has one: the person decides on an unknown effect whatever the tool.
func (br *bgRun) anyWaiter() DeferredWaiter {
	for _, c := range br.caps {
		if c.nb != nil {
			return c.nb.Waiter
		}
	}
	return nil
}

// askPerson turns t, a background task that arrived with an unknown
// effect, into a non-blocking approval watched by the run's waiter, when
// it has one (it reports false otherwise: the follow-up says the outcome
// is unknown). The task stays live, holding its tool call slot.
func (br *bgRun) askPerson(ctx context.Context, t *bgTask) (bool, error) {
	meta, ok := unknownEffectOf(t.err)
	if !ok || t.wait != "" {
		return false, nil
	}
	w := br.anyWaiter()
	if w == nil {
		return false, nil
	}
	meta = tool.DeepCopy(meta)
	id := t.call.Call.ToolCallID
	pt := deferred.PendingTask{TaskID: t.id, Kind: deferred.KindApproval, Tool: t.call.Call.ToolName, ToolCallID: id,
		Args: t.call.Args, Metadata: meta, Attempt: t.attempt + 1, NonBlocking: true}
	task, err := w.Wait(ctx, br.info, pt)
	if err != nil {
		return false, fmt.Errorf("agent: wait for the decision on task %s: %w", t.id, err)
	}
	br.info.Emit(agent.Event{Type: agent.EventDeferredToolRequests, Requests: &deferred.Requests{
		Approvals: []message.ToolCall{t.call.Call}, Metadata: map[string]map[string]any{id: tool.DeepCopy(meta)},
		TaskIDs: map[string]string{id: t.id}}})
	br.mu.Lock()
	t.task, t.wait, t.meta, t.attempt = task, deferred.KindApproval, meta, t.attempt+1
	t.finished, t.val, t.err, t.progress = false, nil, nil, nil
	t.started = time.Now().UTC()
	br.mu.Unlock()
	return true, br.add(t, false)
}

// unknownText is the follow-up of a background call whose outcome is
// unknown and that was not run again: denied by a person (with their
// reason, if any), or with no one to ask.
func unknownText(t *bgTask, reason string) message.Part {
	text := deferred.UnknownEffectText(t.call.Call.ToolName)
	if reason != "" {
		text += " " + reason
	}
	return message.UserText(fmt.Sprintf("Background tool '%s' (task %s): %s", t.call.Call.ToolName, t.id, text))
}
