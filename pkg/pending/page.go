package pending

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"hash/crc32"
	"slices"
	"strconv"
	"strings"

	"github.com/offload-dev/offload/pkg/conversation"
	"github.com/offload-dev/offload/pkg/deferred"
)

// The paged views (SPEC §21): a page of the calls that wait is read from
// the index of pending calls ([Index]), filtered and cut by the server
// that stores it, not from every pending record: each entry names a call
// and its conversation, and the call's pending record stays the truth of
// it (an entry whose record no longer holds the call, or holds it
// answered, is skipped), so that a stale entry hides nothing and shows
// nothing that is not pending.

// Page sizes: a page holds DefaultPageSize calls unless asked for fewer,
// and never more than MaxPageSize.
const (
	DefaultPageSize = 50
	MaxPageSize     = 200
)

// IndexQuery selects entries of the index of pending calls; its zero
// value selects every entry.
type IndexQuery struct {
	// Conversation, Agent, Tool: only the calls of that conversation, of
	// that agent, of that tool.
	Conversation, Agent, Tool string
	// Kinds: only calls of these kinds.
	Kinds []deferred.Kind
}

// IndexEntry is one call of the index of pending calls.
type IndexEntry struct {
	// Seq is its place in the index: entries are read in the order of
	// their Seq, the order in which their calls were first saved pending.
	Seq uint64
	// ConversationID and TaskID name the call.
	ConversationID, TaskID string
}

// Index is the index of pending calls (natsjs/convstore.Pending): one
// entry per call a pending record holds, written before the record that
// holds it and removed after the record that no longer does.
type Index interface {
	// Index returns up to n entries that q selects past sequence after,
	// in their order, and whether more are stored past the last of them.
	Index(ctx context.Context, q IndexQuery, after uint64, n int) ([]IndexEntry, bool, error)
}

// CursorError is the refusal of a cursor that [Desk.Page] did not make
// for the same filter: garbled, altered, or of another list.
type CursorError struct {
	// Cursor is the cursor refused.
	Cursor string
}

func (e *CursorError) Error() string {
	return fmt.Sprintf("cursor %q is not a cursor of this list: pass the next cursor of the page before, with the same filter", e.Cursor)
}

// PageOf is one page of the calls that wait.
type PageOf struct {
	// Calls are the page's calls, in the order their calls were first
	// saved pending (the live approvals no record holds yet, with
	// Config.Live, first on the first page, counted in its limit: all of
	// them there, even past it).
	Calls []Call
	// Next is the cursor of the next page; empty on the last.
	Next string
}

// pageScan bounds the entries one page reads: limit calls, and as many
// stale entries again as pageSlack per call (a page may then hold fewer
// calls than asked, and its Next goes on from where it stopped).
const pageSlack = 4

// Page returns a page of at most limit calls (DefaultPageSize when limit
// is 0 or less, MaxPageSize at most) that f selects and that wait, from
// the one past cursor (the Next of the page before, made for the same
// filter; "" for the first page): read from the index, each checked
// against its pending record as [Desk.Calls] lists it. A cursor not made
// for f is a *CursorError. A call resolved since a page was read is on no
// later page; one saved pending after it was read is on a later page;
// none is on two pages. A page may hold fewer calls than limit and still
// have a Next (it read its share of stale entries).
func (d *Desk) Page(ctx context.Context, f Filter, cursor string, limit int) (PageOf, error) {
	if limit <= 0 {
		limit = DefaultPageSize
	}
	limit = min(limit, MaxPageSize)
	key := f.key()
	after, err := decodeCursor(cursor, key)
	if err != nil {
		return PageOf{}, err
	}
	var out PageOf
	if cursor == "" && d.cfg.Live != nil && f.Conversation == "" {
		if out.Calls, err = d.liveOnly(ctx, f); err != nil {
			return PageOf{}, err
		}
	}
	if len(out.Calls) >= limit {
		out.Next = encodeCursor(after, key)
		return out, nil
	}
	q := IndexQuery(f)
	records := map[string]map[string]Call{} // conversation → its waiting calls by task
	budget := limit * (1 + pageSlack)
	last := after
	for budget > 0 {
		n := min(budget, limit-len(out.Calls)+1)
		entries, more, err := d.cfg.Records.Index(ctx, q, last, n)
		if err != nil {
			return PageOf{}, err
		}
		for i, e := range entries {
			if len(out.Calls) == limit {
				// The page is full: the next one starts at this entry.
				out.Next = encodeCursor(last, key)
				return out, nil
			}
			last = e.Seq
			budget--
			c, ok, err := d.indexed(ctx, records, e)
			if err != nil {
				return PageOf{}, err
			}
			if ok && f.keeps(c) {
				out.Calls = append(out.Calls, c)
			}
			if budget == 0 && (i < len(entries)-1 || more) {
				out.Next = encodeCursor(last, key)
				return out, nil
			}
		}
		if !more || len(entries) == 0 {
			return out, nil
		}
	}
	return out, nil
}

// indexed returns the call entry e names as it waits now, read from its
// conversation's pending record (records keeps the records read by the
// page); ok is false when the record does not hold it waiting (a stale
// entry: resolved, answered, or never saved).
func (d *Desk) indexed(ctx context.Context, records map[string]map[string]Call, e IndexEntry) (Call, bool, error) {
	calls, read := records[e.ConversationID]
	if !read {
		s, err := d.cfg.Records.Get(ctx, e.ConversationID)
		switch {
		case errors.Is(err, conversation.ErrNotFound):
		case err != nil:
			return Call{}, false, err
		default:
			waiting, err := d.waiting(ctx, s, false)
			if err != nil {
				return Call{}, false, err
			}
			calls = make(map[string]Call, len(waiting))
			for _, c := range waiting {
				calls[c.TaskID] = c
			}
		}
		records[e.ConversationID] = calls
	}
	c, ok := calls[e.TaskID]
	return c, ok, nil
}

// liveOnly returns the approvals live runs announced that f selects and
// that no pending record holds (Config.Live): what the first page adds
// to the index's calls.
func (d *Desk) liveOnly(ctx context.Context, f Filter) ([]Call, error) {
	var out []Call
	for _, id := range d.cfg.Live.Conversations(ctx) {
		s, err := d.recordOf(ctx, id)
		if err != nil {
			return nil, err
		}
		recorded := make(map[string]bool, len(s.Tasks))
		for _, t := range s.Tasks {
			recorded[t.TaskID] = true
		}
		for _, t := range d.cfg.Live.Waiting(ctx, id, recorded) {
			if c := d.call(ctx, s, t); f.keeps(c) {
				out = append(out, c)
			}
		}
	}
	return out, nil
}

// key is what a cursor is bound to: the filter it was made for.
func (f Filter) key() string {
	kinds := make([]string, len(f.Kinds))
	for i, k := range f.Kinds {
		kinds[i] = string(k)
	}
	slices.Sort(kinds)
	return strings.Join([]string{f.Conversation, f.Agent, f.Tool, strings.Join(kinds, ",")}, "\x00")
}

// cursorVersion begins every cursor's text.
const cursorVersion = "p1"

// encodeCursor returns the cursor of the entries past sequence seq of
// the list of filter key: opaque (base64url of p1.<seq>.<check>), its
// check a CRC-32 of the sequence and the filter, so that a garbled or
// altered cursor, or one of another filter, is refused. It is no secret
// and grants nothing: a page shows only what its filter and its reader
// may see.
func encodeCursor(seq uint64, key string) string {
	s := strconv.FormatUint(seq, 10)
	return base64.RawURLEncoding.EncodeToString(fmt.Appendf(nil, "%s.%s.%08x", cursorVersion, s, cursorCheck(s, key)))
}

func cursorCheck(seq, key string) uint32 {
	return crc32.ChecksumIEEE([]byte(cursorVersion + "\x00" + seq + "\x00" + key))
}

// decodeCursor returns the sequence of cursor, made for the filter of
// key ("" is the first page: 0).
func decodeCursor(cursor, key string) (uint64, error) {
	if cursor == "" {
		return 0, nil
	}
	bad := &CursorError{Cursor: cursor}
	raw, err := base64.RawURLEncoding.DecodeString(cursor)
	if err != nil {
		return 0, bad
	}
	parts := strings.Split(string(raw), ".")
	if len(parts) != 3 || parts[0] != cursorVersion {
		return 0, bad
	}
	seq, err := strconv.ParseUint(parts[1], 10, 64)
	if err != nil || strconv.FormatUint(seq, 10) != parts[1] {
		return 0, bad
	}
	check, err := strconv.ParseUint(parts[2], 16, 32)
	if err != nil || len(parts[2]) != 8 || uint32(check) != cursorCheck(parts[1], key) {
		return 0, bad
	}
	return seq, nil
}
