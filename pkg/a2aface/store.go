package a2aface

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/a2aproject/a2a-go/v2/a2a"
)

// Record is what is kept of an A2A task: which turn of which
// conversation it is, who owns it, and, once it ended, how (its state
// before is the conversation's, read on each request).
type Record struct {
	// ID is the task's ID (a ULID).
	ID string `json:"id"`
	// ContextID is the A2A context, as the client named it (the
	// conversation's ID when it named none or a ULID).
	ContextID string `json:"context_id"`
	// Conversation is the conversation of the context.
	Conversation string `json:"conversation_id"`
	// Agent is the agent the task was sent to.
	Agent string `json:"agent"`
	// Owner is the name of the token that created the task: only it
	// finds the task.
	Owner string `json:"owner"`
	// Created is when the task was created; Updated when its record last
	// changed.
	Created time.Time `json:"created"`
	Updated time.Time `json:"updated"`
	// Started is set once the turn's run was started in the core: until
	// then the conversation's state is its turn before's.
	Started bool `json:"started,omitempty"`
	// State is the task's terminal state once it ended (empty before).
	State a2a.TaskState `json:"state,omitempty"`
	// Output is a completed task's answer; Error why a failed one failed.
	Output string `json:"output,omitempty"`
	Error  string `json:"error,omitempty"`
	// History are the messages the client sent to the task (the last
	// [historyMax]).
	History []*a2a.Message `json:"history,omitempty"`
	// Push are the task's push notification configs (the last
	// [pushMax]); Pushed the key of the last change they were sent
	// (its state and when it was reached); Claim the replica's claim to
	// send the next, while it holds.
	Push   []*a2a.PushConfig `json:"push,omitempty"`
	Pushed string            `json:"pushed,omitempty"`
	Claim  *PushClaim        `json:"push_claim,omitempty"`
}

// historyMax bounds a record's history; messageMax the JSON of one
// message kept in it (a record is one value of the store: a request's
// body may be 1 MiB).
const (
	historyMax = 32
	messageMax = 8 << 10
)

// kept is m as a record's history keeps it: as sent, or, when its JSON
// is over messageMax, its IDs and role with a text part saying how large
// it was.
func kept(m *a2a.Message) *a2a.Message {
	data, err := json.Marshal(m)
	if err == nil && len(data) <= messageMax {
		return m
	}
	out := *m
	out.Metadata = nil
	out.Parts = a2a.ContentParts{a2a.NewTextPart(fmt.Sprintf("(a message of %d bytes, not kept in the task's history)", len(data)))}
	return &out
}

// Store keeps the A2A tasks' records, as JSON, by owner and ID
// (natsjs/facestore.A2ATasks: any replica reads and writes them). It
// answers conversation.ErrNotFound for a record the owner does not have
// and conversation.ErrConflict for a create of an ID taken or an update
// of a record changed since its revision.
type Store interface {
	// Create stores a new record.
	Create(ctx context.Context, owner, id string, data []byte) error
	// Get returns owner's record id and its revision.
	Get(ctx context.Context, owner, id string) ([]byte, uint64, error)
	// Update replaces owner's record id when its revision is still rev,
	// and returns the new revision.
	Update(ctx context.Context, owner, id string, data []byte, rev uint64) (uint64, error)
	// List calls fn with each of owner's records, in no set order.
	List(ctx context.Context, owner string, fn func(data []byte) error) error
	// Message maps owner's message ID msg to task id the first time and
	// returns the task it maps to: id, or the task of the first message
	// of that ID (a message sent again starts nothing new).
	Message(ctx context.Context, owner, msg, id string) (string, error)
	// Watch adds owner's task id to the tasks watched for push
	// notifications; Unwatch removes it; Watched calls fn with each
	// watched.
	Watch(ctx context.Context, owner, id string) error
	Unwatch(ctx context.Context, owner, id string) error
	Watched(ctx context.Context, fn func(owner, id string)) error
}

// records reads and writes the records of a [Store].
type records struct{ s Store }

func (r records) create(ctx context.Context, rec *Record) error {
	data, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	return r.s.Create(ctx, rec.Owner, rec.ID, data)
}

func (r records) get(ctx context.Context, owner, id string) (*Record, uint64, error) {
	data, rev, err := r.s.Get(ctx, owner, id)
	if err != nil {
		return nil, 0, err
	}
	var rec Record
	if err := json.Unmarshal(data, &rec); err != nil {
		return nil, 0, fmt.Errorf("a2aface: task %s: %w", id, err)
	}
	return &rec, rev, nil
}

func (r records) update(ctx context.Context, rec *Record, rev uint64) (uint64, error) {
	data, err := json.Marshal(rec)
	if err != nil {
		return 0, err
	}
	return r.s.Update(ctx, rec.Owner, rec.ID, data, rev)
}

func (r records) list(ctx context.Context, owner string, fn func(*Record) error) error {
	return r.s.List(ctx, owner, func(data []byte) error {
		var rec Record
		if err := json.Unmarshal(data, &rec); err != nil {
			return fmt.Errorf("a2aface: a task of %s: %w", owner, err)
		}
		return fn(&rec)
	})
}
