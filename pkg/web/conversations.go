package web

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"time"

	"github.com/offload-dev/offload/pkg/conversation"
	"github.com/offload-dev/offload/pkg/message"
	"github.com/offload-dev/offload/pkg/protocol"
	"github.com/offload-dev/offload/pkg/service"
)

// The conversations' pages (SPEC §21): the list of the conversations
// agent serve ran, by status, and each conversation's page (its
// timeline, in inbox_timeline.go), server-rendered like the inbox and
// live with its script.

// row is a conversation as the conversations page lists it.
type row struct {
	ID, Status, Agent, StartedBy, Error string
	// Started is when it was started (its ID's time), Age the time since;
	// Updated when its status last changed, Last the time since.
	Started, Updated time.Time
	Age, Last        string
}

// conversationsPage lists a page of the conversations of the status
// index, of ?status= when given, the latest changed first, from ?cursor=
// (its "Older" link's), ?limit= a page (SPEC §21).
func (h *handler) conversationsPage(w http.ResponseWriter, r *http.Request) error {
	status := r.URL.Query().Get("status")
	if status != "" && !slices.Contains(conversation.Statuses, status) {
		return badRequest("status is running, paused, finished or failed")
	}
	limit, err := limitOf(r)
	if err != nil {
		return err
	}
	page, err := h.Core.ListPage(r.Context(), status, r.URL.Query().Get("cursor"), limit)
	if errors.Is(err, service.ErrBadCursor) {
		return err
	}
	if err != nil {
		return fmt.Errorf("the conversations cannot be listed: %w", err)
	}
	counts, err := h.Core.StatusCounts(r.Context())
	if err != nil {
		return fmt.Errorf("the conversations cannot be counted: %w", err)
	}
	rows := make([]row, 0, len(page.Conversations))
	for _, st := range page.Conversations {
		rw := row{ID: st.ConversationID, Status: st.Status, Agent: st.Agent, StartedBy: st.StartedBy, Error: st.Error, Updated: st.UpdatedAt}
		if id, err := protocol.ParseID(st.ConversationID); err == nil {
			rw.Started = id.Timestamp().UTC()
			rw.Age = age(h.Now().Sub(rw.Started))
		}
		if !st.UpdatedAt.IsZero() {
			rw.Last = age(h.Now().Sub(st.UpdatedAt)) + " ago"
		}
		rows = append(rows, rw)
	}
	type tab struct {
		Status, Label string
		Count         int
		Current       bool
	}
	total := 0
	for _, n := range counts {
		total += n
	}
	tabs := []tab{{Label: "all", Count: total, Current: status == ""}}
	for _, s := range conversation.Statuses {
		tabs = append(tabs, tab{Status: s, Label: s, Count: counts[s], Current: s == status})
	}
	next := ""
	if page.Next != "" {
		q := url.Values{"cursor": {page.Next}}
		if status != "" {
			q.Set("status", status)
		}
		if v := r.URL.Query().Get("limit"); v != "" {
			q.Set("limit", v)
		}
		next = "/conversations?" + q.Encode()
	}
	h.render(w, r, http.StatusOK, "conversations", map[string]any{"Rows": rows, "Tabs": tabs, "Status": status, "Next": next,
		"Cursor": r.URL.Query().Get("cursor") != ""})
	return nil
}

// cancelPage interrupts a conversation's live run from its page (the
// cancel button), then shows its page again.
func (h *handler) cancelPage(w http.ResponseWriter, r *http.Request) error {
	id, err := pathConversation(r)
	if err != nil {
		return err
	}
	if err := h.Core.Cancel(r.Context(), id); err != nil {
		return unknownConversation(id, err)
	}
	http.Redirect(w, r, "/conversations/"+id+"?done=cancelling", http.StatusSeeOther) //nolint:gosec // G710: id is a parsed ULID (pathConversation): a path of this site
	return nil
}

// liveCall is a call of a live run its saved history does not hold yet:
// running (with its last progress), or returned since the last save.
type liveCall struct {
	Tool, ToolCallID, Task, Args string
	At                           time.Time
	// Progress is its last progress message, Fraction its fraction in
	// percent (-1: none said).
	Progress string
	Fraction int
	// Queued says its last report was that it waits in its tool's queue,
	// held by a limit (a queued event, SPEC §19; Progress says why).
	Queued bool
	// Outcome and Result are its result's, once returned.
	Outcome, Result string
}

// liveEvent is the part of a §6.3 event the conversation's page reads.
type liveEvent struct {
	Type       string          `json:"type"`
	At         time.Time       `json:"at"`
	ToolCallID string          `json:"tool_call_id"`
	Tool       string          `json:"tool"`
	TaskID     string          `json:"task_id"`
	Args       json.RawMessage `json:"args"`
	Outcome    string          `json:"outcome"`
	Content    json.RawMessage `json:"content"`
	Message    string          `json:"message"`
	Fraction   *float64        `json:"fraction"`
}

// recentSlack is how far before a state's last save the page reads the
// events of its run: the save's clock (its process's) and the events'
// (the NATS server's) may differ by as much.
const recentSlack = 5 * time.Second

// liveCalls returns the calls of conversation id's live run that its
// saved history hist (saved at saved) holds no outcome of: the tool_call
// events stored since, with their progress and results. A call the
// history holds without its return (its step stored before its calls
// run, SPEC §20) is one of them, unless it is in skip (a call waiting for
// a person, shown with its decision).
func (h *handler) liveCalls(r *http.Request, id string, hist message.History, saved time.Time, skip map[string]string) ([]liveCall, error) {
	known := map[string]bool{}
	for _, m := range hist {
		for _, p := range m.Parts {
			switch x := p.(type) {
			case message.ToolReturn:
				known[x.ToolCallID] = true
			case message.RetryPrompt:
				known[x.ToolCallID] = true
			}
		}
	}
	for call := range skip {
		known[call] = true
	}
	var calls []*liveCall
	byCall, byTask := map[string]*liveCall{}, map[string]*liveCall{}
	err := h.Core.Recent(r.Context(), id, saved.Add(-recentSlack), func(raw json.RawMessage) bool {
		var ev liveEvent
		if json.Unmarshal(raw, &ev) != nil {
			return true
		}
		switch ev.Type {
		case "tool_call":
			if known[ev.ToolCallID] || byCall[ev.ToolCallID] != nil {
				return true
			}
			c := &liveCall{Tool: ev.Tool, ToolCallID: ev.ToolCallID, Task: ev.TaskID, Args: pretty(ev.Args), At: ev.At, Fraction: -1}
			calls = append(calls, c)
			byCall[ev.ToolCallID] = c
			if ev.TaskID != "" {
				byTask[ev.TaskID] = c
			}
		case "background_task_started":
			if c := byCall[ev.ToolCallID]; c != nil && ev.TaskID != "" {
				c.Task = ev.TaskID
				byTask[ev.TaskID] = c
			}
		case "progress":
			c := byCall[ev.ToolCallID]
			if c == nil {
				c = byTask[ev.TaskID]
			}
			if c != nil {
				c.Progress, c.Queued = ev.Message, false
				if ev.Fraction != nil {
					c.Fraction = int(*ev.Fraction * 100)
				}
			}
		case "queued":
			markQueued(byCall, byTask, ev)
		case "tool_result":
			if c := byCall[ev.ToolCallID]; c != nil {
				c.Outcome = cmp.Or(ev.Outcome, "success")
				var text string
				if json.Unmarshal(ev.Content, &text) != nil {
					text = string(ev.Content)
				}
				c.Result = text
			}
		case "final":
			// A run that ended: its history holds (or will hold) the
			// rest; a later run's calls follow.
			calls, byCall, byTask = nil, map[string]*liveCall{}, map[string]*liveCall{}
		}
		return true
	})
	out := make([]liveCall, 0, len(calls))
	for _, c := range calls {
		out = append(out, *c)
	}
	return out, err
}

// markQueued marks the call of a queued event as waiting in its tool's
// queue, its message as its progress.
func markQueued(byCall, byTask map[string]*liveCall, ev liveEvent) {
	c := byCall[ev.ToolCallID]
	if c == nil {
		c = byTask[ev.TaskID]
	}
	if c != nil {
		c.Progress, c.Queued = ev.Message, true
	}
}
