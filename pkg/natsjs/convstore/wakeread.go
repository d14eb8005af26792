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
	"github.com/offload-dev/offload/pkg/natsjs/internal/direct"
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
	seen, err := s.ReadLease(ctx, id)
	return seen.Held, err
}

// LeaseSeen is what a read of a conversation's lease key saw: a holder,
// a release (or no lease ever), or a lease that lapsed; and the key's
// revision then, at which [Store.ClaimLoad] takes the lease.
type LeaseSeen struct {
	// Held says a process held the lease (not lapsed), Holder until
	// Until.
	Held   bool
	Holder string
	Until  time.Time
	// Released says the key held a release's delete marker, or nothing:
	// no holder was left to write the conversation.
	Released bool
	// Seq is the key's last revision (0: nothing on the key).
	Seq uint64
}

// ReadLease reads conversation id's lease key: one direct get of its
// last message.
func (s *Store) ReadLease(ctx context.Context, id string) (LeaseSeen, error) {
	if err := checkConvID(id); err != nil {
		return LeaseSeen{}, err
	}
	return s.readLease(ctx, leaseKeyPre+id)
}

func (s *Store) readLease(ctx context.Context, key string) (LeaseSeen, error) {
	last, err := direct.Last(ctx, s.cfg.JetStream.Conn(), s.names.ConversationsStream, "$KV."+s.names.ConversationsBucket+"."+key)
	if err != nil {
		return LeaseSeen{}, fmt.Errorf("natsjs: lease %s: %w", key, err)
	}
	if last == nil || last.Deleted() {
		return LeaseSeen{Released: true, Seq: seqOf(last)}, nil
	}
	seen := LeaseSeen{Seq: last.Seq}
	var cur leaseValue
	if json.Unmarshal(last.Data, &cur) == nil && time.Now().Before(cur.ExpiresAt) {
		seen.Held, seen.Holder, seen.Until = true, cur.Holder, cur.ExpiresAt
	}
	return seen, nil
}

// LeaseExpiry returns when conversation id's lease lapses unless its
// holder renews it; the zero time when no process holds it.
func (s *Store) LeaseExpiry(ctx context.Context, id string) (time.Time, error) {
	if err := checkConvID(id); err != nil {
		return time.Time{}, err
	}
	e, err := s.kv.Get(ctx, leaseKeyPre+id)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return time.Time{}, nil
	}
	if err != nil {
		return time.Time{}, fmt.Errorf("natsjs: lease of %s: %w", id, err)
	}
	var cur leaseValue
	if err := json.Unmarshal(e.Value(), &cur); err != nil {
		return time.Time{}, fmt.Errorf("natsjs: lease of %s: %w", id, err)
	}
	if !time.Now().Before(cur.ExpiresAt) {
		return time.Time{}, nil // lapsed
	}
	return cur.ExpiresAt, nil
}

// Arrived returns the tasks of sum for which a message is stored on the
// task's own subject: a decision (approval), an answer (external call)
// or a worker's result (background task), by a direct get of the
// subject's last message each. A message found there may still be
// refused when the conversation's run reads it (a duplicate, a deferral,
// another attempt's result): Arrived says what is worth a claim, the
// run's [Inbox.Collect] what arrived.
func (in *Inbox) Arrived(ctx context.Context, sum *conversation.Summary) (map[string]bool, error) {
	return in.ArrivedAfter(ctx, sum, conversation.Checkpoint{})
}

// ArrivedAfter is [Inbox.Arrived] for the messages stored past cp only
// (a task's last message at a sequence of its stream beyond cp's): what
// arrived after the run that read up to cp, which the lease holder
// checks once it let go of the conversation.
func (in *Inbox) ArrivedAfter(ctx context.Context, sum *conversation.Summary, cp conversation.Checkpoint) (map[string]bool, error) {
	nc := in.cfg.JetStream.Conn()
	out := map[string]bool{}
	for _, t := range sum.Tasks {
		stream, subject, after := in.names.Results, in.subj.Result(sum.ConversationID, t.TaskID, t.Tool), cp.Results
		switch t.Kind {
		case deferred.KindApproval:
			stream, subject, after = in.names.Decisions, in.subj.Decision(sum.ConversationID, t.TaskID), cp.Decisions
		case deferred.KindExternal:
			stream, subject, after = in.names.Answers, in.subj.Answer(sum.ConversationID, t.TaskID), cp.Answers
		}
		m, err := in.get(ctx, nc, stream, subject)
		if err != nil {
			return nil, err
		}
		if seqOf(m) > after {
			out[t.TaskID] = true
		}
	}
	return out, nil
}

// seqOf is m's stream sequence, 0 for no message.
func seqOf(m *direct.Msg) uint64 {
	if m == nil {
		return 0
	}
	return m.Seq
}
