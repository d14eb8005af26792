package pending

import (
	"cmp"
	"context"
	"slices"
	"strings"
	"time"

	"github.com/offload-dev/offload/pkg/deferred"
)

// Queued is a call held in its tool's queue by a limit (SPEC §19): it
// waits for no person and is not decided; it runs once the limit lets it
// (or an operator cancels it). It still counts against its run's
// tool_calls limit.
type Queued struct {
	// ConversationID, TaskID and Attempt are the call's; Tool its tool.
	ConversationID string `json:"conversation_id"`
	TaskID         string `json:"task_id"`
	Attempt        int    `json:"attempt,omitempty"`
	Tool           string `json:"tool"`
	// Agent and Tenant are who made the call, when its task said.
	Agent  string `json:"agent,omitempty"`
	Tenant string `json:"tenant,omitempty"`
	// Kind is always "queued", beside the kinds of [Call].
	Kind deferred.Kind `json:"kind"`
	// Reason is why it waited when last looked at: max_in_flight, rate,
	// cool_down, paused or order.
	Reason string `json:"reason,omitempty"`
	// Since is when it was first held; NotBefore, when set, the earliest
	// it may start.
	Since     time.Time `json:"since"`
	NotBefore time.Time `json:"not_before,omitzero"`
}

// KindQueued is the kind of a [Queued] call (not a deferred call's: a
// [Filter]'s Kinds may name it to select queued calls only).
const KindQueued deferred.Kind = "queued"

// Queue lists the calls held in their tools' queues (natsjs/toolctl).
type Queue interface {
	// Held returns every call waiting in a tool's queue.
	Held(ctx context.Context) ([]Queued, error)
}

// Queued returns the calls f selects held in their tools' queues by a
// limit (SPEC §19), by conversation then since (none without
// Config.Queue). f's Kinds select them when empty or naming
// [KindQueued].
func (d *Desk) Queued(ctx context.Context, f Filter) ([]Queued, error) {
	if d.cfg.Queue == nil || (len(f.Kinds) > 0 && !slices.Contains(f.Kinds, KindQueued)) {
		return nil, nil
	}
	held, err := d.cfg.Queue.Held(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]Queued, 0, len(held))
	for _, q := range held {
		if (f.Conversation == "" || q.ConversationID == f.Conversation) && (f.Agent == "" || q.Agent == f.Agent) &&
			(f.Tool == "" || q.Tool == f.Tool) {
			q.Kind = KindQueued
			out = append(out, q)
		}
	}
	slices.SortStableFunc(out, func(a, b Queued) int {
		return cmp.Or(strings.Compare(a.ConversationID, b.ConversationID), a.Since.Compare(b.Since))
	})
	return out, nil
}
