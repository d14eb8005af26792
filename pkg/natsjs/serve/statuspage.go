package serve

import (
	"context"
	"encoding/base64"
	"fmt"
	"hash/crc32"
	"strconv"
	"strings"

	"github.com/offload-dev/offload/pkg/conversation"
	"github.com/offload-dev/offload/pkg/pending"
	"github.com/offload-dev/offload/pkg/service"
)

// ListPage implements service.Core: a page of the status index's
// conversations of status, the latest changed first, read from the index
// of statuses (Store.StatusPage), limit of them (pending.DefaultPageSize
// when 0 or less, pending.MaxPageSize at most), from cursor; an entry
// that says running while no process holds the conversation's lease reads
// as paused, as List says.
func (s *Service) ListPage(ctx context.Context, status, cursor string, limit int) (*service.ConversationsPage, error) {
	if limit <= 0 {
		limit = pending.DefaultPageSize
	}
	limit = min(limit, pending.MaxPageSize)
	before, err := decodeListCursor(cursor, status)
	if err != nil {
		return nil, err
	}
	sts, next, err := s.cfg.Store.StatusPage(ctx, status, before, limit)
	if err != nil {
		return nil, err
	}
	for i, st := range sts {
		if st.Status != conversation.StatusRunning {
			continue
		}
		lease, err := s.cfg.Store.ReadLease(ctx, st.ConversationID)
		if err != nil {
			return nil, err
		}
		if !lease.Held {
			sts[i].Status = conversation.StatusPaused
		}
	}
	page := &service.ConversationsPage{Conversations: sts}
	if next != 0 {
		page.Next = encodeListCursor(next, status)
	}
	return page, nil
}

// StatusCounts implements service.Core.
func (s *Service) StatusCounts(ctx context.Context) (map[string]int, error) {
	return s.cfg.Store.StatusCounts(ctx)
}

// listCursorVersion begins every cursor of the conversations' pages.
const listCursorVersion = "c1"

// encodeListCursor is the cursor of the conversations of status changed
// before sequence seq of the index: base64url of c1.<seq>.<check>, the
// check a CRC-32 of the sequence and the status (no secret: it grants
// nothing; it refuses a garbled cursor and one of another status).
func encodeListCursor(seq uint64, status string) string {
	n := strconv.FormatUint(seq, 10)
	return base64.RawURLEncoding.EncodeToString(fmt.Appendf(nil, "%s.%s.%08x", listCursorVersion, n, listCursorCheck(n, status)))
}

func listCursorCheck(seq, status string) uint32 {
	return crc32.ChecksumIEEE([]byte(listCursorVersion + "\x00" + seq + "\x00" + status))
}

// decodeListCursor returns the sequence of cursor, made for status (""
// is the first page: 0).
func decodeListCursor(cursor, status string) (uint64, error) {
	if cursor == "" {
		return 0, nil
	}
	bad := fmt.Errorf("cursor %q: %w", cursor, service.ErrBadCursor)
	raw, err := base64.RawURLEncoding.DecodeString(cursor)
	if err != nil {
		return 0, bad
	}
	parts := strings.Split(string(raw), ".")
	if len(parts) != 3 || parts[0] != listCursorVersion || len(parts[2]) != 8 {
		return 0, bad
	}
	seq, err := strconv.ParseUint(parts[1], 10, 64)
	if err != nil || seq == 0 || strconv.FormatUint(seq, 10) != parts[1] {
		return 0, bad
	}
	check, err := strconv.ParseUint(parts[2], 16, 32)
	if err != nil || uint32(check) != listCursorCheck(parts[1], status) {
		return 0, bad
	}
	return seq, nil
}
