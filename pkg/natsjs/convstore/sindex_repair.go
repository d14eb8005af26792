package convstore

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/offload-dev/offload/pkg/conversation"
	"github.com/offload-dev/offload/pkg/natsjs/internal/direct"
)

// repairStatuses makes the index of statuses true to the status entries
// (part of [Store.RepairIndex]): it publishes the message of an entry the
// index lacks (an entry written whose message the server refused, a store
// written before the index: listed then as changed now), and removes the
// messages whose status no entry says (a removal that failed, a process
// killed between the message and the entry, an entry expired with its
// conversation) once they are older than a minute (Store.repairGrace: a
// message written by a SetStatus still writing its entry is kept). It
// reads every message and every entry; it returns how many messages it
// published and removed.
func (s *Store) repairStatuses(ctx context.Context) (added, removed int, err error) {
	// The messages are read before the entries: a SetStatus publishes its
	// message before its entry is stored.
	before, err := s.allStatusMessages(ctx)
	if err != nil {
		return 0, 0, err
	}
	entries := map[string]conversation.Status{}
	if err := s.Statuses(ctx, func(st conversation.Status) error {
		entries[st.ConversationID] = st
		return nil
	}); err != nil {
		return 0, 0, err
	}
	for id, st := range entries {
		if _, ok := before[s.statusSubject(id, st.Status)]; ok {
			continue
		}
		// Read again: the message of an entry changed since is its writer's.
		cur, err := s.GetStatus(ctx, id)
		if err != nil {
			return added, removed, err
		}
		if cur == nil || cur.Status != st.Status {
			continue
		}
		if err := s.indexStatus(ctx, *cur, mustJSON(*cur)); err != nil {
			return added, removed, err
		}
		added++
	}
	for subject, m := range before {
		id, token, _ := strings.Cut(strings.TrimPrefix(subject, s.statusIndexPrefix()), ".")
		if st, ok := entries[id]; (ok && indexToken(st.Status) == token) || time.Since(m.Stored) < s.repairGrace {
			continue
		}
		if checkConvID(id) == nil {
			// Read again: an entry written since the listing may say it.
			cur, err := s.GetStatus(ctx, id)
			if err != nil {
				return added, removed, err
			}
			if cur != nil && indexToken(cur.Status) == token {
				continue
			}
		}
		if err := s.statusIndex.DeleteMsg(ctx, m.Seq); err != nil && !isGone(err) {
			return added, removed, fmt.Errorf("natsjs: index of statuses: %w", err)
		}
		removed++
	}
	return added, removed, nil
}

// allStatusMessages returns every message of the index of statuses by
// subject.
func (s *Store) allStatusMessages(ctx context.Context) (map[string]*direct.Msg, error) {
	out := map[string]*direct.Msg{}
	from := uint64(1)
	for {
		msgs, more, err := s.batches.Next(ctx, s.names.StatusIndex, ">", from, direct.BatchSize*4)
		if err != nil {
			return nil, fmt.Errorf("natsjs: index of statuses: %w", err)
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
