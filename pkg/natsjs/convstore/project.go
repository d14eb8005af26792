package convstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/offload-dev/offload/pkg/conversation"
)

// projectAttempts bounds the compare-and-set loop of [Store.project]:
// only the lease holder saves, so a conflict is a stalled former holder's
// write, and a second attempt settles it.
const projectAttempts = 3

// project writes the pending record of st, saved at revision rev: its
// [conversation.Summary] under the key <id> of the pending bucket, or no
// key when st waits for nothing. The record is a projection of the
// conversation's key: written after it, with compare-and-set on the
// record's own revision, and never replaced by the summary of an older
// revision (a former holder's late write). A crash between the two writes
// leaves the record of the previous save; the next save repairs it.
func (s *Store) project(ctx context.Context, st *conversation.State, rev conversation.Revision) error {
	sum := conversation.Summarize(st, rev)
	var value []byte
	if sum != nil {
		var err error
		if value, err = json.Marshal(sum); err != nil {
			return fmt.Errorf("natsjs: pending record of %s: %w", st.ID, err)
		}
	}
	// The index of pending calls around the record (pindex.go): its
	// calls' entries added before, the others' removed after.
	var have []indexed
	var read, indexing bool
	before := func() {
		if !indexing {
			indexing = true
			have, read = s.indexBefore(ctx, sum)
		}
	}
	wrote, err := s.writeRecord(ctx, st.ID, rev, value, before)
	if wrote {
		s.indexAfter(ctx, st.ID, sum, have, read)
	}
	return err
}

// writeRecord writes value (nil: none), conversation id's pending record
// of revision rev, calling before first when it writes; wrote says
// whether it did (a record of a later save, or no record before nor
// now, is left as it is).
func (s *Store) writeRecord(ctx context.Context, id string, rev conversation.Revision, value []byte, before func()) (wrote bool, err error) {
	if ok, wrote, err := s.projectKnown(ctx, id, value, before); ok || err != nil {
		return wrote, err
	}
	key := id
	for range projectAttempts {
		var cur uint64 // the record's revision; 0: no record
		e, err := s.pending.Get(ctx, key)
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound):
		case err != nil:
			return false, fmt.Errorf("natsjs: pending record of %s: %w", id, err)
		default:
			var have conversation.Summary
			if json.Unmarshal(e.Value(), &have) == nil && have.Revision >= rev {
				return false, nil // written by a later save
			}
			cur = e.Revision()
		}
		var seq uint64
		if value == nil && cur == 0 {
			return false, nil
		}
		before()
		switch {
		case value == nil:
			seq, err = s.deleteRecord(ctx, key, cur)
		case cur == 0:
			seq, err = s.pending.Create(ctx, key, value)
		default:
			seq, err = s.pending.Update(ctx, key, value, cur)
		}
		if err == nil {
			s.knowRecord(key, seq, value != nil)
			return true, nil
		}
		if !errors.Is(err, jetstream.ErrKeyExists) && !errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
			return false, fmt.Errorf("natsjs: pending record of %s: %w", id, err)
		}
	}
	return false, fmt.Errorf("natsjs: pending record of %s: changed by another writer %d times", id, projectAttempts)
}

// Reproject writes the pending record of every stored conversation again
// from its state (see [Store.project]), and its status index entry when
// it has none ([Store.backfillStatus]), then repairs the index of pending
// calls ([Store.RepairIndex]), and returns how many
// conversations it read: what `agent provision` does once for a store
// written before the pending records or the status index existed, whose
// conversations would otherwise have none until their next save or run.
func (s *Store) Reproject(ctx context.Context) (int, error) {
	ids, err := s.List(ctx)
	if err != nil {
		return 0, err
	}
	for i, id := range ids {
		st, rev, err := s.Load(ctx, id)
		if errors.Is(err, conversation.ErrNotFound) {
			continue // gone meanwhile
		}
		if err != nil {
			return i, err
		}
		if err := s.project(ctx, st, rev); err != nil {
			return i, err
		}
		if err := s.backfillStatus(ctx, st, rev); err != nil {
			return i, err
		}
	}
	// The index of pending calls of the records written before it, once
	// the removals the writes left under way have ended.
	if err := s.Flush(ctx); err != nil {
		return len(ids), err
	}
	if _, _, err := s.RepairIndex(ctx); err != nil {
		return len(ids), err
	}
	return len(ids), nil
}

// backfillStatus creates the status index entry of st, saved at revision
// rev, from its stored state when it has none: paused while it waits for
// something (a pending record), finished otherwise. An entry that exists
// (a run's, since the index existed) is left as it is.
func (s *Store) backfillStatus(ctx context.Context, st *conversation.State, rev conversation.Revision) error {
	status := "finished"
	if conversation.Summarize(st, rev) != nil {
		status = "paused"
	}
	entry := conversation.Status{ConversationID: st.ID, Status: status, UpdatedAt: time.Now().UTC(), StartedBy: st.StartedBy}
	if st.Agent != nil {
		entry.Agent = st.Agent.Name
	}
	if cur, err := s.GetStatus(ctx, st.ID); err != nil || cur != nil {
		if err == nil {
			// An entry of before the index of statuses: indexed again.
			err = s.indexStatus(ctx, *cur, mustJSON(*cur))
		}
		return err
	}
	data, err := json.Marshal(entry)
	if err != nil {
		return err
	}
	return s.writeStatus(ctx, entry, data, func(ctx context.Context) error {
		if _, err := s.kv.Create(ctx, statusKeyPre+st.ID, data); err != nil && !errors.Is(err, jetstream.ErrKeyExists) {
			return fmt.Errorf("natsjs: status of %s: %w", st.ID, err)
		}
		return nil
	})
}

// mustJSON is st's JSON form (a Status always has one).
func mustJSON(st conversation.Status) []byte {
	data, _ := json.Marshal(st)
	return data
}
