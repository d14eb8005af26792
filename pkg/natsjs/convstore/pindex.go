package convstore

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/offload-dev/offload/pkg/conversation"
	"github.com/offload-dev/offload/pkg/deferred"
	"github.com/offload-dev/offload/pkg/natsjs/internal/direct"
	"github.com/offload-dev/offload/pkg/natsjs/internal/jsop"
	"github.com/offload-dev/offload/pkg/pending"
)

// The index of pending calls (SPEC §21): the stream <PREFIX>_PENDING_INDEX
// holds one message per call a pending record holds, on
//
//	<prefix>.pindex.<conversation>.<task>.<audience>.<kind>.<agent>.<tool>
//
// (audience: people for the calls a person answers, auto for the
// others; agent and tool as subject tokens, see indexToken), no payload,
// at most one per subject: what the paged views read a page of, with a
// filter on the subject and a start sequence, by a batched direct get
// (pending.Desk.Page). The conversation store keeps it with every write
// of a pending record ([Store.project]): the entries of the record's
// calls are added, once each (a call keeps its first place), before the
// record is written; those of the calls the record no longer holds are
// removed (deleted by sequence: no delete marker stays) after it is.
// So a process that dies between the two writes leaves an entry too many,
// never one too few, and the record read for each entry listed is the
// truth of it. An entry of a record gone (expired) or left by a crash is
// removed by [Store.RepairIndex], which also adds the entries a record
// holds and the index lacks (a store written before the index).

// indexConvBatch is how many of a conversation's entries one read asks for.
const indexConvBatch = 64

// audience is the audience token of a call of kind k.
func audience(k deferred.Kind) string {
	if slices.Contains(pending.ForPeople, k) {
		return "people"
	}
	return "auto"
}

// tokenRE is what a name may be to be its own subject token.
var tokenRE = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)

// indexToken is name as a subject token: itself when it is made of
// letters, digits, '_' and '-' (every tool's name is), else '~' and its
// base64url (no padding), which no such name begins with: an agent's
// name with dots or spaces, the empty name ("~").
func indexToken(name string) string {
	if tokenRE.MatchString(name) {
		return name
	}
	return "~" + base64.RawURLEncoding.EncodeToString([]byte(name))
}

// indexPrefix is <prefix>.pindex.
func (s *Store) indexPrefix() string { return s.names.Prefix + ".pindex." }

// indexSubject is the subject of the entry of call t of conversation
// conv of agent.
func indexSubject(prefix, conv, agent string, t deferred.PendingTask) string {
	return prefix + conv + "." + t.TaskID + "." + audience(t.Kind) + "." + indexToken(string(t.Kind)) + "." + indexToken(agent) + "." + indexToken(t.Tool)
}

// indexed is an entry of the index: its subject and sequence.
type indexed struct {
	subject string
	seq     uint64
}

// indexOf returns the entries the index holds of conversation conv.
func (s *Store) indexOf(ctx context.Context, conv string) ([]indexed, error) {
	var out []indexed
	filter := s.indexPrefix() + conv + ".>"
	from := uint64(1)
	for {
		msgs, more, err := s.batches.Next(ctx, s.names.PendingIndex, filter, from, indexConvBatch)
		if err != nil {
			return nil, fmt.Errorf("natsjs: index of pending calls of %s: %w", conv, err)
		}
		for _, m := range msgs {
			out = append(out, indexed{subject: m.Subject, seq: m.Seq})
			from = m.Seq + 1
		}
		if !more || len(msgs) == 0 {
			return out, nil
		}
	}
}

// indexCalls adds the entries of the calls of sum, conversation id's
// pending record about to be written, that the index lacks, and returns
// the entries it held (for [Store.unindexCalls]); read is false when they
// could not be read, and then every call's entry is added (once: one
// stored already keeps its place). A transient failure of an add is
// retried (jsop.Retry): an entry that could not be added is a call the
// pages miss until RepairIndex.
func (s *Store) indexCalls(ctx context.Context, sum *conversation.Summary) (have []indexed, read bool, err error) {
	have, err = s.indexOf(ctx, sum.ConversationID)
	read = err == nil
	if err != nil {
		s.log.Warn("index of pending calls not read; every entry added", slog.String("conversation", sum.ConversationID), slog.Any("error", err))
	}
	prefix := s.indexPrefix()
	for _, t := range sum.Tasks {
		subject := indexSubject(prefix, sum.ConversationID, sum.Agent, t)
		if slices.ContainsFunc(have, func(e indexed) bool { return e.subject == subject }) {
			continue
		}
		if _, err := jsop.Retry(ctx, s.log, "index of pending calls", func(ctx context.Context) error { return s.addEntry(ctx, subject) }); err != nil {
			return have, read, err
		}
	}
	return have, read, nil
}

// addEntry publishes the entry subject once: one already stored keeps
// its place (the publish expects no message on the subject).
func (s *Store) addEntry(ctx context.Context, subject string) error {
	_, err := s.cfg.JetStream.PublishMsg(ctx, &nats.Msg{Subject: subject}, jetstream.WithExpectLastSequencePerSubject(0))
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) && (apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence || apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant) {
		return nil // added meanwhile
	}
	if err != nil {
		return fmt.Errorf("natsjs: index of pending calls: add %s: %w", subject, err)
	}
	return nil
}

// unindexCalls removes the entries of conversation id that its pending
// record sum (nil: none), just written, does not hold; have are the
// entries read before the write (nil: read them now).
func (s *Store) unindexCalls(ctx context.Context, id string, sum *conversation.Summary, have []indexed, read bool) error {
	if !read {
		var err error
		if have, err = s.indexOf(ctx, id); err != nil {
			return err
		}
	}
	keep := map[string]bool{}
	if sum != nil {
		for _, t := range sum.Tasks {
			keep[indexSubject(s.indexPrefix(), id, sum.Agent, t)] = true
		}
	}
	for _, e := range have {
		if keep[e.subject] {
			continue
		}
		if err := s.deleteEntry(ctx, e.seq); err != nil {
			return err
		}
	}
	return nil
}

// deleteEntry removes the entry at seq (one removed already is no error).
func (s *Store) deleteEntry(ctx context.Context, seq uint64) error {
	err := s.index.DeleteMsg(ctx, seq)
	if err != nil && !isGone(err) {
		return fmt.Errorf("natsjs: index of pending calls: remove %d: %w", seq, err)
	}
	return nil
}

// indexBefore adds, before pending record sum (nil: none) is written,
// the entries of its calls the index lacks, and returns what
// [Store.indexAfter] needs: the entries the index held, if read.
func (s *Store) indexBefore(ctx context.Context, sum *conversation.Summary) (have []indexed, read bool) {
	if sum == nil {
		return nil, false
	}
	// The removal an earlier save left under way ends first: it would
	// remove an entry this save finds and keeps.
	if err := s.unindexed(ctx, sum.ConversationID); err != nil {
		return nil, false // the record is written all the same, as below
	}
	have, read, err := s.indexCalls(ctx, sum)
	if err != nil {
		// The record is written all the same: RepairIndex adds what is
		// missing.
		s.log.Warn("index of pending calls not written", slog.String("conversation", sum.ConversationID), slog.Any("error", err))
	}
	return have, read
}

// indexAfter removes, once conversation id's pending record sum (nil:
// none) is written, the entries of the calls it no longer holds: on a
// goroutine of its own (counted by Store.cleaning), off the saver's path
// (a continuation's save, before its model request, paid a read and a
// removal), after the removal an earlier save of the conversation left
// under way, and before the next save adds entries (indexBefore waits
// for it). Until then the pages skip the entries (each is read against
// its record); a removal that fails, or a process that exits meanwhile,
// leaves them to RepairIndex.
func (s *Store) indexAfter(ctx context.Context, id string, sum *conversation.Summary, have []indexed, read bool) {
	done := make(chan struct{})
	s.mu.Lock()
	prev := s.unindexing[id]
	s.unindexing[id] = done
	s.mu.Unlock()
	s.cleaning.Add(1)
	go func() {
		defer s.cleaning.Done()
		defer func() {
			s.mu.Lock()
			if s.unindexing[id] == done {
				delete(s.unindexing, id)
			}
			s.mu.Unlock()
			close(done)
		}()
		if prev != nil {
			<-prev
		}
		s.mu.Lock()
		gate := s.removals
		s.mu.Unlock()
		if gate != nil {
			<-gate
		}
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanTimeout) // the save's, which returns meanwhile
		defer cancel()
		if err := s.unindexCalls(ctx, id, sum, have, read); err != nil {
			// A stale entry hides nothing (the record is read for each one
			// listed); RepairIndex removes it.
			s.log.Warn("index of pending calls not cleaned", slog.String("conversation", id), slog.Any("error", err))
		}
	}()
}

// unindexed waits until the removal of conversation id's entries under
// way, if one is, has ended, or ctx ends.
func (s *Store) unindexed(ctx context.Context, id string) error {
	s.mu.Lock()
	done, waits := s.unindexing[id], s.waitsRemoval
	s.mu.Unlock()
	if done == nil {
		return nil
	}
	if waits != nil {
		waits()
	}
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Flush waits until the removals the store's writes left under way, off
// their path, have ended (a former status's message of the index of
// statuses, the entries of the index of pending calls a record no longer
// holds), or ctx ends: what a process does before it exits, so that it
// leaves none to the repair.
func (s *Store) Flush(ctx context.Context) error {
	done := make(chan struct{})
	go func() {
		s.cleaning.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Index implements pending.Index: up to n entries of the index of
// pending calls that q selects, past sequence after, by a batched direct
// get filtered on their subjects (no consumer; the people roles may do
// it), and whether more are stored past them.
func (p *Pending) Index(ctx context.Context, q pending.IndexQuery, after uint64, n int) ([]pending.IndexEntry, bool, error) {
	prefix := p.names.Prefix + ".pindex."
	msgs, more, err := p.batches.Next(ctx, p.names.PendingIndex, indexFilter(prefix, q), after+1, n)
	if err != nil {
		return nil, false, fmt.Errorf("natsjs: index of pending calls: %w", err)
	}
	out := make([]pending.IndexEntry, 0, len(msgs))
	for _, m := range msgs {
		rest := strings.TrimPrefix(m.Subject, prefix)
		conv, rest, _ := strings.Cut(rest, ".")
		task, _, _ := strings.Cut(rest, ".")
		out = append(out, pending.IndexEntry{Seq: m.Seq, ConversationID: conv, TaskID: task})
	}
	return out, more, nil
}

// indexFilter is the subject filter of the entries q selects: a
// superset (several kinds are every entry; the desk keeps the calls its
// filter selects of what it reads).
func indexFilter(prefix string, q pending.IndexQuery) string {
	if q.Conversation == "" && q.Agent == "" && q.Tool == "" && (len(q.Kinds) == 0 || len(q.Kinds) > 1) {
		// Every entry, or those of an audience (the inbox's: approvals
		// and external calls), as ">": the stream holds nothing else, and
		// the server reads ">" without matching each subject, which it
		// does for a wildcard filter on every batch (and again to count
		// the entries past it) at a cost that grows with the index
		// (measured: the first page with 10 000 calls pending 3.2× the
		// one with 10). The desk skips the calls of other kinds it reads,
		// within its page's budget.
		return ">"
	}
	tok := func(v string) string {
		if v == "" {
			return "*"
		}
		return indexToken(v)
	}
	conv := "*"
	if q.Conversation != "" {
		conv = indexToken(q.Conversation)
	}
	aud, kind := "*", "*"
	if len(q.Kinds) > 0 {
		aud = audience(q.Kinds[0])
		for _, k := range q.Kinds[1:] {
			if audience(k) != aud {
				aud = "*"
			}
		}
		if len(q.Kinds) == 1 {
			kind = indexToken(string(q.Kinds[0]))
		}
	}
	return prefix + conv + ".*." + aud + "." + kind + "." + tok(q.Agent) + "." + tok(q.Tool)
}

// RepairIndex makes the index of pending calls true to the pending
// records (repairPending) and the index of statuses true to the status
// entries (repairStatuses, sindex_repair.go). It reads every record,
// entry and message of both: `agent provision` runs it, and agent serve
// now and then, never a view. It returns how many entries and messages
// it added and removed.
func (s *Store) RepairIndex(ctx context.Context) (added, removed int, err error) {
	added, removed, err = s.repairPending(ctx)
	if err != nil {
		return added, removed, err
	}
	sa, sr, err := s.repairStatuses(ctx)
	return added + sa, removed + sr, err
}

// repairPending makes the index of pending calls true to the pending
// records: it adds the entries of the calls the records hold that it
// lacks (a store written before the index, an add that failed), and
// removes those of calls no record holds (a record expired with its
// conversation; a crash between a record's write and the removal) that
// are older than the records read (an entry added by a save still
// writing its record is kept). It returns how many entries it added and
// removed.
func (s *Store) repairPending(ctx context.Context) (added, removed int, err error) {
	// The entries stored before the records are read: one added since
	// may be of a record not written yet.
	before, err := s.allEntries(ctx)
	if err != nil {
		return 0, 0, err
	}
	ids, err := s.recordIDs(ctx)
	if err != nil {
		return 0, 0, err
	}
	holds := map[string]bool{}
	prefix := s.indexPrefix()
	for _, id := range ids {
		e, err := s.pending.Get(ctx, id)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			continue
		}
		if err != nil {
			return added, removed, fmt.Errorf("natsjs: pending record of %s: %w", id, err)
		}
		sum, err := decodeRecord(id, e.Value())
		if err != nil {
			s.log.Warn("index of pending calls: record not read", slog.String("conversation", id), slog.Any("error", err))
			continue
		}
		for _, t := range sum.Tasks {
			subject := indexSubject(prefix, id, sum.Agent, t)
			holds[subject] = true
			if _, ok := before[subject]; ok {
				continue
			}
			if err := s.addEntry(ctx, subject); err != nil {
				return added, removed, err
			}
			added++
		}
	}
	for subject, m := range before {
		if holds[subject] || time.Since(m.Stored) < s.repairGrace {
			continue
		}
		// Read again: a record written since the listing may hold it.
		conv, _, _ := strings.Cut(strings.TrimPrefix(subject, prefix), ".")
		sum, err := s.recordOf(ctx, conv)
		if err != nil {
			return added, removed, err
		}
		if sum != nil && slices.ContainsFunc(sum.Tasks, func(t deferred.PendingTask) bool {
			return indexSubject(prefix, conv, sum.Agent, t) == subject
		}) {
			continue
		}
		if err := s.deleteEntry(ctx, m.Seq); err != nil {
			return added, removed, err
		}
		removed++
	}
	return added, removed, nil
}

// repairGrace is how old an entry no record holds must be for
// [Store.RepairIndex] to remove it (Store.repairGrace): a save adds its
// entries a moment before it writes the record that holds them.
const repairGrace = time.Minute

// allEntries returns every entry of the index by subject.
func (s *Store) allEntries(ctx context.Context) (map[string]*direct.Msg, error) {
	out := map[string]*direct.Msg{}
	from := uint64(1)
	for {
		msgs, more, err := s.batches.Next(ctx, s.names.PendingIndex, ">", from, direct.BatchSize*4)
		if err != nil {
			return nil, fmt.Errorf("natsjs: index of pending calls: %w", err)
		}
		for _, m := range msgs {
			out[m.Subject] = m
			from = m.Seq + 1
		}
		if !more || len(msgs) == 0 {
			return out, nil
		}
	}
}

// recordIDs returns the conversations with a pending record.
func (s *Store) recordIDs(ctx context.Context) ([]string, error) {
	l, err := s.pending.ListKeysFiltered(ctx, "*")
	if errors.Is(err, jetstream.ErrNoKeysFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("natsjs: list pending records: %w", err)
	}
	var ids []string
	for k := range l.Keys() {
		ids = append(ids, k)
	}
	return ids, nil
}

// recordOf returns conversation id's pending record, nil when it has
// none.
func (s *Store) recordOf(ctx context.Context, id string) (*conversation.Summary, error) {
	e, err := s.pending.Get(ctx, id)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("natsjs: pending record of %s: %w", id, err)
	}
	return decodeRecord(id, e.Value())
}
