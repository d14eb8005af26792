package convstore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/offload-dev/offload/pkg/conversation"
)

// The index of the conversations' statuses (SPEC §21): the stream
// <PREFIX>_STATUS_INDEX holds one message per conversation, on
//
//	<prefix>.sindex.<conversation>.<status>
//
// its entry of the status index (status.<id>) as its payload: what the
// conversations page reads a page of, the newest first, filtered by
// status on the subject. The conversation comes first so that its own
// messages are a literal prefix for the server; the page of every status
// reads ">" (the server's linear path), a status's page its subject's
// wildcard, which the server matches against every subject.
// [Store.SetStatus] keeps it in one round trip, as the entry alone
// (writeStatus): the conversation's message of its new status is
// published (again: it then comes last) and its entry written at once,
// the message first on the connection; its messages of other statuses
// are removed once both writes are acknowledged, off the writer's path
// (cleanStatuses), until which its former status counts it. The status
// entry stays the truth of each message listed (a message whose status
// it no longer says is skipped), so a process killed between the writes
// leaves a message too many, never a conversation unlisted; an entry
// written whose message the server refused (SetStatus then fails), or a
// message of another status a removal missed, [Store.RepairIndex]
// repairs (repairStatuses).

// statusIndexPrefix is <prefix>.sindex.
func (s *Store) statusIndexPrefix() string { return s.names.Prefix + ".sindex." }

// statusSubject is the subject of conversation id's message of status.
func (s *Store) statusSubject(id, status string) string {
	return s.statusIndexPrefix() + id + "." + indexToken(status)
}

// statusFilter is the filter of the index's messages of status ("": all).
func (s *Store) statusFilter(status string) string {
	if status == "" {
		return ">"
	}
	return s.statusIndexPrefix() + "*." + indexToken(status)
}

// writeStatus writes the status entry data of st with put and its
// message of the index of statuses at once, the message first (its
// publish queued on the connection before put sends the entry, so that
// the server reads it first): one round trip, as the entry alone. Once
// both are stored, the conversation's messages of other statuses are
// removed off the caller's path (cleanStatuses).
func (s *Store) writeStatus(ctx context.Context, st conversation.Status, data []byte, put func(context.Context) error) error {
	id := st.ConversationID
	subject := s.statusSubject(id, st.Status)
	ack, err := s.publishStatus(&nats.Msg{Subject: subject, Data: data})
	if err != nil {
		return fmt.Errorf("natsjs: index of statuses of %s: %w", id, err)
	}
	putErr := put(ctx)
	var seq uint64
	select {
	case a := <-ack.Ok():
		seq = a.Sequence
	case err = <-ack.Err():
	case <-ctx.Done():
		err = ctx.Err()
	}
	switch {
	case err != nil:
		return fmt.Errorf("natsjs: index of statuses of %s: %w", id, err)
	case putErr != nil:
		return putErr
	}
	s.cleanStatuses(id, subject, seq, s.wroteStatus(id, statusMsg{subject, seq}))
	return nil
}

// statusMsg is a message of the index of statuses: its subject and
// sequence.
type statusMsg struct {
	subject string
	seq     uint64
}

// wroteStatus records m, the message of the index of statuses this
// process just wrote for conversation id, if it holds its lease, and
// returns the one it wrote before while holding it (seq 0: none).
func (s *Store) wroteStatus(id string, m statusMsg) (before statusMsg) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if h := s.held[id]; h != nil {
		before, h.status = h.status, m
	}
	return before
}

// cleanTimeout bounds a removal of a conversation's former messages of
// the index of statuses.
const cleanTimeout = 5 * time.Second

// cleanStatuses removes, on a goroutine of its own (counted by
// Store.cleaning), conversation id's messages of the index of statuses
// stored before seq on another subject than subject: its former status's,
// or one a kill left. When this process wrote the former one while it
// held the lease (before: a run's end after its running), that one is
// removed without a read (one a kill left before then is the repair's);
// otherwise the conversation's messages are read. Until they are removed (a round trip or two after
// the write) the conversation's former status counts it; a removal that
// fails, or a process that exits meanwhile, leaves them to the next write
// of its status or to [Store.RepairIndex] (a minute after their write).
// The pages skip them all along: each message is read against its entry.
func (s *Store) cleanStatuses(id, subject string, seq uint64, before statusMsg) {
	if before.seq != 0 && before.subject == subject {
		return // replaced on its subject
	}
	s.cleaning.Add(1)
	go func() {
		defer s.cleaning.Done()
		ctx, cancel := context.WithTimeout(context.Background(), cleanTimeout)
		defer cancel()
		if before.seq != 0 {
			if err := s.statusIndex.DeleteMsg(ctx, before.seq); err != nil && !isGone(err) {
				s.log.Warn("index of statuses not cleaned", slog.String("conversation", id), slog.Any("error", err))
			}
			return
		}
		msgs, _, err := s.batches.Next(ctx, s.names.StatusIndex, s.statusIndexPrefix()+id+".*", 1, len(conversation.Statuses)+1)
		if err != nil {
			s.log.Warn("index of statuses not cleaned", slog.String("conversation", id), slog.Any("error", err))
			return
		}
		for _, m := range msgs {
			if m.Subject == subject || m.Seq >= seq {
				continue // this write's, or a later one's
			}
			if err := s.statusIndex.DeleteMsg(ctx, m.Seq); err != nil && !isGone(err) {
				s.log.Warn("index of statuses not cleaned", slog.String("conversation", id), slog.Any("error", err))
			}
		}
	}()
}

// indexStatus publishes st's message of the index of statuses (data its
// entry's JSON form) and waits for the server to store it.
func (s *Store) indexStatus(ctx context.Context, st conversation.Status, data []byte) error {
	m := &nats.Msg{Subject: s.statusSubject(st.ConversationID, st.Status), Data: data}
	if _, err := s.cfg.JetStream.PublishMsg(ctx, m); err != nil {
		return fmt.Errorf("natsjs: index of statuses of %s: %w", st.ConversationID, err)
	}
	return nil
}

// StatusPage returns up to limit entries of the status index of status
// ("": all), the latest changed first, each as the status index holds it
// now, from the index of statuses: those changed before sequence before
// (0: the newest), and the sequence the next page reads before (0: this
// is the last). It reads the index by windows of sequences, the newest
// first, each twice as long as the one before, until limit entries are
// found: a page costs its entries and the index's messages of other
// statuses in the windows read, not the whole index. A conversation whose
// status changes while pages are read moves to the first page.
func (s *Store) StatusPage(ctx context.Context, status string, before uint64, limit int) ([]conversation.Status, uint64, error) {
	hi := before
	if hi == 0 {
		info, err := s.statusIndex.Info(ctx)
		if err != nil {
			return nil, 0, fmt.Errorf("natsjs: index of statuses: %w", err)
		}
		hi = info.State.LastSeq + 1
	}
	filter := s.statusFilter(status)
	var out []conversation.Status
	last := uint64(0)
	for w := uint64(max(limit, 1)) * 4; len(out) < limit && hi > 1; w *= 2 {
		lo := uint64(1)
		if hi > w {
			lo = hi - w
		}
		window, err := s.statusWindow(ctx, filter, lo, hi)
		if err != nil {
			return nil, 0, err
		}
		for i := len(window) - 1; i >= 0 && len(out) < limit; i-- {
			m := window[i]
			last = m.seq
			st, ok, err := s.statusOf(ctx, m.subject)
			if err != nil {
				return nil, 0, err
			}
			if ok {
				out = append(out, st)
			}
		}
		hi = lo
	}
	if len(out) < limit || last <= 1 {
		return out, 0, nil
	}
	return out, last, nil
}

// statusWindow returns the index's messages on filter of sequences lo to
// hi (excluded), in order.
func (s *Store) statusWindow(ctx context.Context, filter string, lo, hi uint64) ([]indexed, error) {
	var out []indexed
	for from := lo; from < hi; {
		msgs, more, err := s.batches.Next(ctx, s.names.StatusIndex, filter, from, 256)
		if err != nil {
			return nil, fmt.Errorf("natsjs: index of statuses: %w", err)
		}
		for _, m := range msgs {
			if m.Seq >= hi {
				return out, nil
			}
			out = append(out, indexed{subject: m.Subject, seq: m.Seq})
			from = m.Seq + 1
		}
		if !more || len(msgs) == 0 {
			break
		}
	}
	return out, nil
}

// statusOf returns the status entry of the conversation of the index's
// message subject, and whether it says the message's status.
func (s *Store) statusOf(ctx context.Context, subject string) (conversation.Status, bool, error) {
	id, token, ok := strings.Cut(strings.TrimPrefix(subject, s.statusIndexPrefix()), ".")
	if !ok {
		return conversation.Status{}, false, nil
	}
	st, err := s.GetStatus(ctx, id)
	if err != nil || st == nil {
		return conversation.Status{}, false, err
	}
	return *st, indexToken(st.Status) == token, nil
}

// StatusCounts returns how many conversations the index of statuses
// holds of each status (a count of the index's messages on each status's
// subjects, which the server keeps: no message read).
func (s *Store) StatusCounts(ctx context.Context) (map[string]int, error) {
	out := map[string]int{}
	for _, st := range conversation.Statuses {
		n, err := s.batches.Count(ctx, s.names.StatusIndex, s.statusFilter(st))
		if err != nil {
			return nil, fmt.Errorf("natsjs: index of statuses: %w", err)
		}
		out[st] = int(n) //nolint:gosec // G115: a count of conversations
	}
	return out, nil
}

// isGone reports whether err is a removal's of a message removed already.
func isGone(err error) bool {
	return errors.Is(err, jetstream.ErrMsgNotFound) || errors.Is(err, jetstream.ErrMsgDeleteUnsuccessful)
}
