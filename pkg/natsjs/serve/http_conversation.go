package serve

import (
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"strings"

	"github.com/offload-dev/offload/pkg/conversation"
	"github.com/offload-dev/offload/pkg/message"
	"github.com/offload-dev/offload/pkg/natsjs/convstore"
	"github.com/offload-dev/offload/pkg/protocol"
)

// list answers the conversations agent serve has run, of ?status= when
// given, from the status index.
func (h *handler) list(w http.ResponseWriter, r *http.Request) {
	status := r.URL.Query().Get("status")
	if status != "" && !slices.Contains(Statuses, status) {
		writeError(w, http.StatusBadRequest, "bad_request", "status is running, paused, finished or failed")
		return
	}
	out := []convstore.Status{}
	if err := h.Service.List(r.Context(), status, func(st convstore.Status) error {
		out = append(out, st)
		return nil
	}); err != nil {
		writeError(w, http.StatusInternalServerError, "internal", err.Error())
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"conversations": out})
}

// history answers the stored history of a conversation, as its JSON form
// (message.History) is stored.
func (h *handler) history(w http.ResponseWriter, r *http.Request) {
	id, ok := pathConversation(w, r)
	if !ok {
		return
	}
	hist, err := h.Service.History(r.Context(), id)
	if err != nil {
		lookupError(w, id, err)
		return
	}
	if hist == nil {
		hist = message.History{}
	}
	writeJSON(w, http.StatusOK, hist)
}

// messageRequest is the body of POST /v1/conversations/{id}/messages.
type messageRequest struct {
	Prompt string `json:"prompt"`
}

// message continues a conversation with nothing pending on a prompt:
// 202 (200 with its final event with ?wait=1), 409 while calls are
// pending or a run of it is live.
func (h *handler) message(w http.ResponseWriter, r *http.Request) {
	id, ok := pathConversation(w, r)
	if !ok {
		return
	}
	var req messageRequest
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<20)).Decode(&req); err != nil || strings.TrimSpace(req.Prompt) == "" {
		writeError(w, http.StatusBadRequest, "bad_request", `the body is not a message {"prompt"} with a prompt`)
		return
	}
	run, err := h.Service.Continue(r.Context(), id, req.Prompt)
	if errors.Is(err, ErrNoAgent) {
		writeError(w, http.StatusConflict, "no_agent", err.Error())
		return
	}
	if err != nil {
		h.startError(w, err)
		return
	}
	h.answerRun(w, r, run)
}

// cancel interrupts a conversation's live run wherever it runs (SIGINT's
// semantics): 202 once asked, 404 for a conversation agent serve never
// ran, 409 when no run of it is live.
func (h *handler) cancel(w http.ResponseWriter, r *http.Request) {
	id, ok := pathConversation(w, r)
	if !ok {
		return
	}
	err := h.Service.Cancel(r.Context(), id)
	switch {
	case err == nil:
		writeJSON(w, http.StatusAccepted, map[string]any{"conversation_id": id, "cancelling": true})
	case errors.Is(err, ErrNotRunning):
		writeError(w, http.StatusConflict, "not_running", err.Error())
	default:
		lookupError(w, id, err)
	}
}

// pathConversation returns the conversation ID of the request's path; a
// malformed one is answered 400 (ok false).
func pathConversation(w http.ResponseWriter, r *http.Request) (id string, ok bool) {
	id = r.PathValue("id")
	if _, err := protocol.ParseID(id); err != nil {
		writeError(w, http.StatusBadRequest, "bad_request", err.Error())
		return "", false
	}
	return id, true
}

// lookupError answers err of reading conversation id: 404 when the store
// has none, else 500.
func lookupError(w http.ResponseWriter, id string, err error) {
	if errors.Is(err, conversation.ErrNotFound) {
		writeError(w, http.StatusNotFound, "not_found", "conversation "+id+" is unknown")
		return
	}
	writeError(w, http.StatusInternalServerError, "internal", err.Error())
}
