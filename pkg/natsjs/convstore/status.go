package convstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/offload-dev/offload/pkg/conversation"
)

// statusKeyPre prefixes the status index's keys in the conversations
// bucket: status.<id>.
const statusKeyPre = "status."

// The status index: a conversation's conversation.Status is kept at the
// key status.<id> of the conversations bucket, expiring with the
// conversation, written by whoever holds its lease when a run starts and
// ends (session.Run) and by [Store.Reproject] for a conversation stored
// before the index.

// SetStatus records st in the status index (last writer wins: only the
// lease holder sets it), and in the index of statuses the conversations
// page reads (sindex.go).
func (s *Store) SetStatus(ctx context.Context, st conversation.Status) error {
	if err := checkConvID(st.ConversationID); err != nil {
		return err
	}
	if st.UpdatedAt.IsZero() {
		st.UpdatedAt = time.Now().UTC()
	}
	data, err := json.Marshal(st)
	if err != nil {
		return err
	}
	// The entry with its message of the index of statuses (sindex.go).
	return s.writeStatus(ctx, st, data, func(ctx context.Context) error {
		if _, err := s.kv.Put(ctx, statusKeyPre+st.ConversationID, data); err != nil {
			return fmt.Errorf("natsjs: status of %s: %w", st.ConversationID, err)
		}
		return nil
	})
}

// RecordStatus records conversation id's status of agent agentName
// (implements session.StatusRecorder: the lease holder's session writes
// it at its run's start and end).
func (s *Store) RecordStatus(ctx context.Context, id, agentName, status string) error {
	return s.SetStatus(ctx, conversation.Status{ConversationID: id, Agent: agentName, Status: status})
}

// RecordFailure records that conversation id's run of agent agentName
// failed with the error text errText (implements
// session.FailureRecorder).
func (s *Store) RecordFailure(ctx context.Context, id, agentName, errText string) error {
	return s.SetStatus(ctx, conversation.Status{ConversationID: id, Agent: agentName, Status: conversation.StatusFailed, Error: errText})
}

// GetStatus returns conversation id's entry in the status index; nil
// when it has none (not run by agent serve).
func (s *Store) GetStatus(ctx context.Context, id string) (*conversation.Status, error) {
	if err := checkConvID(id); err != nil {
		return nil, err
	}
	e, err := s.kv.Get(ctx, statusKeyPre+id)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("natsjs: status of %s: %w", id, err)
	}
	var st conversation.Status
	if err := json.Unmarshal(e.Value(), &st); err != nil {
		return nil, fmt.Errorf("natsjs: status of %s: %w", id, err)
	}
	return &st, nil
}

// Statuses calls fn with every entry of the status index, one at a time
// as the server sends them (none is kept), and stops at fn's first
// error.
func (s *Store) Statuses(ctx context.Context, fn func(conversation.Status) error) error {
	w, err := s.kv.Watch(ctx, statusKeyPre+"*", jetstream.IgnoreDeletes())
	if err != nil {
		return fmt.Errorf("natsjs: list statuses: %w", err)
	}
	defer func() { _ = w.Stop() }()
	for {
		select {
		case e, ok := <-w.Updates():
			if !ok {
				return fmt.Errorf("natsjs: list statuses: the watch ended")
			}
			if e == nil {
				return nil // every current entry was sent
			}
			var st conversation.Status
			if json.Unmarshal(e.Value(), &st) != nil || st.ConversationID != strings.TrimPrefix(e.Key(), statusKeyPre) {
				continue // not an entry of ours
			}
			if err := fn(st); err != nil {
				return err
			}
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// cancelKeyPre prefixes the cancel markers' keys in the conversations
// bucket: cancel.<id>, put by whoever asks that a conversation's live run
// be interrupted, read by the replica that runs it.
const cancelKeyPre = "cancel."

// RequestCancel puts conversation id's cancel marker.
func (s *Store) RequestCancel(ctx context.Context, id string) error {
	if err := checkConvID(id); err != nil {
		return err
	}
	if _, err := s.kv.Put(ctx, cancelKeyPre+id, []byte(time.Now().UTC().Format(time.RFC3339Nano))); err != nil {
		return fmt.Errorf("natsjs: cancel %s: %w", id, err)
	}
	return nil
}

// WatchCancels calls fn, on a goroutine of its own, with the conversation
// of every cancel marker put from now on, until stop is called (which
// waits for it).
func (s *Store) WatchCancels(ctx context.Context, fn func(id string)) (stop func(), err error) {
	w, err := s.kv.Watch(ctx, cancelKeyPre+"*", jetstream.UpdatesOnly(), jetstream.IgnoreDeletes())
	if err != nil {
		return nil, fmt.Errorf("natsjs: watch the cancel markers: %w", err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for e := range w.Updates() { // closed by Stop
			if e != nil {
				fn(strings.TrimPrefix(e.Key(), cancelKeyPre))
			}
		}
	}()
	return func() {
		_ = w.Stop()
		<-done
	}, nil
}

// WatchStatuses calls fn, on a goroutine of its own, with every entry of
// the status index and its revision: the current ones first, then each
// one written from then on, until stop is called (which waits for it).
// Callers keep what they need of them (agent serve: the running ones).
func (s *Store) WatchStatuses(ctx context.Context, fn func(st conversation.Status, rev uint64)) (stop func(), err error) {
	w, err := s.kv.Watch(ctx, statusKeyPre+"*", jetstream.IgnoreDeletes())
	if err != nil {
		return nil, fmt.Errorf("natsjs: watch the status index: %w", err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for e := range w.Updates() { // closed by Stop
			if e == nil {
				continue // the current entries were sent
			}
			var st conversation.Status
			if json.Unmarshal(e.Value(), &st) != nil || st.ConversationID != strings.TrimPrefix(e.Key(), statusKeyPre) {
				continue // not an entry of ours
			}
			fn(st, e.Revision())
		}
	}()
	return func() {
		_ = w.Stop()
		<-done
	}, nil
}
