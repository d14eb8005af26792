package web

import (
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/offload-dev/offload/pkg/conversation"
	"github.com/offload-dev/offload/pkg/message"
	"github.com/offload-dev/offload/pkg/service"
	"github.com/offload-dev/offload/pkg/sse"
)

// list answers a page of the conversations agent serve has run, of
// ?status= when given, the latest changed first, from ?cursor= (the page
// before's next), ?limit= of them at most (SPEC §21): {"conversations":
// [...], "next": "<cursor>"}, next only when more may follow.
func (h *handler) list(w http.ResponseWriter, r *http.Request) error {
	status := r.URL.Query().Get("status")
	if status != "" && !slices.Contains(conversation.Statuses, status) {
		return badRequest("status is running, paused, finished or failed")
	}
	limit, err := limitOf(r)
	if err != nil {
		return err
	}
	page, err := h.Core.ListPage(r.Context(), status, r.URL.Query().Get("cursor"), limit)
	if err != nil {
		return err
	}
	list := page.Conversations
	if list == nil {
		list = []conversation.Status{}
	}
	out := map[string]any{"conversations": list}
	if page.Next != "" {
		out["next"] = page.Next
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// history answers the stored history of a conversation, as its JSON form
// (message.History) is stored.
func (h *handler) history(w http.ResponseWriter, r *http.Request) error {
	id, err := pathConversation(r)
	if err != nil {
		return err
	}
	st, err := h.Core.State(r.Context(), id)
	if err != nil {
		return unknownConversation(id, err)
	}
	hist := st.History
	if hist == nil {
		hist = message.History{}
	}
	writeJSON(w, http.StatusOK, hist)
	return nil
}

// messageRequest is the body of POST /v1/conversations/{id}/messages.
type messageRequest struct {
	Prompt string `json:"prompt"`
}

// postMessage continues a conversation with nothing pending on a prompt:
// 202 (200 with its final event with ?wait=1), 409 while calls are
// pending or a run of it is live.
func (h *handler) postMessage(w http.ResponseWriter, r *http.Request) error {
	id, err := pathConversation(r)
	if err != nil {
		return err
	}
	var req messageRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil || strings.TrimSpace(req.Prompt) == "" {
		return badRequest(`the body is not a message {"prompt"} with a prompt`)
	}
	ctx, err := tenantContext(r, "") // a bound token continues its tenant's only
	if err != nil {
		return err
	}
	run, err := h.Core.Continue(ctx, id, req.Prompt)
	if err != nil {
		return err
	}
	h.answerRun(w, r, run)
	return nil
}

// cancel interrupts a conversation's live run wherever it runs (SIGINT's
// semantics): 202 once asked, 404 for a conversation agent serve never
// ran, 409 when no run of it is live.
func (h *handler) cancel(w http.ResponseWriter, r *http.Request) error {
	id, err := pathConversation(r)
	if err != nil {
		return err
	}
	if err := h.Core.Cancel(r.Context(), id); err != nil {
		return unknownConversation(id, err)
	}
	writeJSON(w, http.StatusAccepted, map[string]any{"conversation_id": id, "cancelling": true})
	return nil
}

// events serves a conversation's events (GET /v1/conversations/{id}/events,
// and the inbox's timeline): Server-Sent Events, one §6.3 event per data
// line with its id (its sequence in the events stream); Last-Event-ID
// resumes, on any replica; the stream ends after the conversation's next
// final event.
func (h *handler) events(w http.ResponseWriter, r *http.Request) error {
	conv, err := pathConversation(r)
	if err != nil {
		return err
	}
	var after uint64
	if last := r.Header.Get("Last-Event-ID"); last != "" {
		if after, err = strconv.ParseUint(last, 10, 64); err != nil {
			return badRequest("Last-Event-ID: not an event id")
		}
	}
	s, err := sse.New(w, h.Limits.Heartbeat)
	if err != nil {
		return err
	}
	defer s.Close()
	began := false
	err = h.Core.Watch(r.Context(), conv, after, func() {
		began = s.Open("") == nil
	}, func(seq uint64, ev json.RawMessage) bool {
		return s.Event(strconv.FormatUint(seq, 10), "", ev) == nil
	})
	if err != nil && !began {
		return err
	}
	if err != nil && r.Context().Err() == nil && !errors.Is(err, service.ErrClosed) {
		h.Logger.Warn("events", slog.String("conversation_id", conv), slog.Any("error", err))
	}
	return nil
}
