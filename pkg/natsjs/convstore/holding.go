package convstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/offload-dev/offload/pkg/natsjs/internal/direct"
)

// What this process knows of the conversations whose lease it holds:
// while it holds one, it is the only writer of its pending record (a
// former holder's late write is refused by compare-and-set), so the
// revision of the record's key it last read or wrote saves the read
// before each projection ([Store.project]); a write that is refused all
// the same falls back to reading the record.

// holding is what this process knows of a conversation it holds.
type holding struct {
	// seq is the last revision of the pending record's key (the record's,
	// or its delete marker's when live is false; 0: nothing on the key),
	// valid when known is set.
	seq   uint64
	live  bool
	known bool
	// status is the subject and sequence of the message of the index of
	// statuses this process last wrote for it (sindex.go; seq 0: none).
	status statusMsg
}

// hold records that this process holds conversation id's lease.
func (s *Store) hold(id string) {
	s.mu.Lock()
	s.held[id] = &holding{}
	s.mu.Unlock()
}

// letGo forgets what was known of conversation id, whose lease this
// process no longer holds.
func (s *Store) letGo(id string) {
	s.mu.Lock()
	delete(s.held, id)
	delete(s.objects, id)
	s.mu.Unlock()
}

// holds reports whether this process holds conversation id's lease.
func (s *Store) holds(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.held[id] != nil
}

// knownRecord returns what this process knows of held conversation id's
// pending record key; ok is false when it knows nothing.
func (s *Store) knownRecord(id string) (h holding, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if p := s.held[id]; p != nil && p.known {
		return *p, true
	}
	return holding{}, false
}

// knowRecord records the last revision of conversation id's pending
// record key (live: a record, else a delete marker or nothing), if this
// process holds it.
func (s *Store) knowRecord(id string, seq uint64, live bool) {
	s.mu.Lock()
	if h := s.held[id]; h != nil {
		h.seq, h.live, h.known = seq, live, true
	}
	s.mu.Unlock()
}

// forgetRecord makes the pending record of conversation id unknown again
// (a write was refused: someone else wrote it).
func (s *Store) forgetRecord(id string) {
	s.mu.Lock()
	if h := s.held[id]; h != nil {
		h.known = false
	}
	s.mu.Unlock()
}

// readRecord reads the last revision of held conversation id's pending
// record key into what this process knows of it (Load does, beside the
// state's read, so that the first projection of a run needs no read); a
// failed read leaves it unknown.
func (s *Store) readRecord(ctx context.Context, id string) {
	if seq, live, ok := s.lookRecord(ctx, id); ok {
		s.knowRecord(id, seq, live)
	}
}

// lookRecord returns the last revision of conversation id's pending
// record key, a record (live) or its delete marker, by a direct get; ok
// is false when it could not be read.
func (s *Store) lookRecord(ctx context.Context, id string) (seq uint64, live, ok bool) {
	m, err := direct.Last(ctx, s.cfg.JetStream.Conn(), s.names.PendingStream, "$KV."+s.names.PendingBucket+"."+id)
	if err != nil {
		return 0, false, false
	}
	return seqOf(m), m != nil && !m.Deleted(), true
}

// projectKnown writes the pending record value (nil: none) of held
// conversation id as [Store.project] does, from what this process knows
// of its key, calling before first when it writes: no read, and nothing
// at all when neither had a record. ok is false when it knows nothing,
// or the write was refused (then it knows nothing any more): project
// reads the record and writes again; wrote says whether it wrote.
func (s *Store) projectKnown(ctx context.Context, id string, value []byte, before func()) (ok, wrote bool, err error) {
	h, known := s.knownRecord(id)
	if !known {
		return false, false, nil
	}
	if value == nil && !h.live {
		return true, false, nil
	}
	before()
	var seq uint64
	if value == nil {
		seq, err = s.deleteRecord(ctx, id, h.seq)
	} else {
		// An update at the last revision replaces a record or a delete
		// marker; at revision 0 it creates the key.
		seq, err = s.pending.Update(ctx, id, value, h.seq)
	}
	if errors.Is(err, jetstream.ErrKeyRevisionMismatch) || errors.Is(err, jetstream.ErrKeyExists) {
		s.forgetRecord(id)
		return false, false, nil
	}
	if err != nil {
		s.forgetRecord(id)
		return false, false, fmt.Errorf("natsjs: pending record of %s: %w", id, err)
	}
	s.knowRecord(id, seq, value != nil)
	return true, true, nil
}

// deleteRecord deletes conversation id's pending record at revision rev,
// as the KV bucket's Delete does, and returns its delete marker's
// revision (which the bucket's Delete does not tell).
func (s *Store) deleteRecord(ctx context.Context, id string, rev uint64) (uint64, error) {
	return s.records.Delete(ctx, id, rev)
}
