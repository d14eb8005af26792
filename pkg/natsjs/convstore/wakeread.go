package convstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/offload-dev/offload/pkg/conversation"
	"github.com/offload-dev/offload/pkg/deferred"
)

// What a wake of `agent serve` reads before it claims a conversation: two
// KV gets and a direct get per pending task, no consumer, no history.

// Summary returns the pending record of conversation id (the key <id> of
// the pending bucket, written with every save): nil when there is none
// (the conversation waits for nothing since its last save, or is
// unknown).
func (s *Store) Summary(ctx context.Context, id string) (*conversation.Summary, error) {
	if err := checkConvID(id); err != nil {
		return nil, err
	}
	e, err := s.pending.Get(ctx, id)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("natsjs: pending record of %s: %w", id, err)
	}
	var sum conversation.Summary
	if err := json.Unmarshal(e.Value(), &sum); err != nil {
		return nil, fmt.Errorf("natsjs: pending record of %s: %w", id, err)
	}
	return &sum, nil
}

// Held reports whether a process holds conversation id's lease now (a
// lease not lapsed): a live run, whose next save the pending record
// does not show yet.
func (s *Store) Held(ctx context.Context, id string) (bool, error) {
	if err := checkConvID(id); err != nil {
		return false, err
	}
	e, err := s.kv.Get(ctx, leaseKeyPre+id)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("natsjs: lease of %s: %w", id, err)
	}
	var cur leaseValue
	return json.Unmarshal(e.Value(), &cur) == nil && time.Now().Before(cur.ExpiresAt), nil
}

// Arrived returns the tasks of sum for which a message is stored on the
// task's own subject: a decision (approval), an answer (external call)
// or a worker's result (background task), by a direct get of the
// subject's last message each. A message found there may still be
// refused when the conversation's run reads it (a duplicate, a deferral,
// another attempt's result): Arrived says what is worth a claim, the
// run's [Inbox.Collect] what arrived.
func (in *Inbox) Arrived(ctx context.Context, sum *conversation.Summary) (map[string]bool, error) {
	nc := in.cfg.JetStream.Conn()
	out := map[string]bool{}
	for _, t := range sum.Tasks {
		stream, subject := in.names.Results, in.subj.Result(sum.ConversationID, t.TaskID, t.Tool)
		switch t.Kind {
		case deferred.KindApproval:
			stream, subject = in.names.Decisions, in.subj.Decision(sum.ConversationID, t.TaskID)
		case deferred.KindExternal:
			stream, subject = in.names.Answers, in.subj.Answer(sum.ConversationID, t.TaskID)
		}
		m, err := in.get(ctx, nc, stream, subject, 0, false)
		if err != nil {
			return nil, err
		}
		if m != nil {
			out[t.TaskID] = true
		}
	}
	return out, nil
}
