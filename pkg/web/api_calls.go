package web

import (
	"encoding/json"
	"net/http"
	"strconv"

	"github.com/offload-dev/offload/pkg/deferred"
	"github.com/offload-dev/offload/pkg/pending"
	"github.com/offload-dev/offload/pkg/protocol"
)

// pending lists a page of the calls pending across conversations,
// nothing stored for them yet, filtered by ?tool= and ?kind=, from
// ?cursor= (the page before's next), ?limit= of them at most (SPEC §21):
// {"pending": [...], "next": "<cursor>"}, next only when more may follow.
func (h *handler) pending(w http.ResponseWriter, r *http.Request) error {
	f := pending.Filter{Tool: r.URL.Query().Get("tool")}
	switch kind := deferred.Kind(r.URL.Query().Get("kind")); kind {
	case "":
	case deferred.KindApproval, deferred.KindExternal, deferred.KindBackground, pending.KindQueued:
		f.Kinds = []deferred.Kind{kind}
	default:
		return badRequest("kind is approval, external, background or queued")
	}
	page, err := h.pageOf(r, f)
	if err != nil {
		return err
	}
	calls := page.Calls
	if calls == nil {
		calls = []pending.Call{}
	}
	queued, err := h.queued(r, f)
	if err != nil {
		return err
	}
	out := map[string]any{"pending": calls, "queued": queued}
	if page.Next != "" {
		out["next"] = page.Next
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// queued returns the calls held in their tools' queues that f selects
// (SPEC §19): listed beside the pending calls, never decided.
func (h *handler) queued(r *http.Request, f pending.Filter) ([]pending.Queued, error) {
	queued, err := h.Desk.Queued(r.Context(), f)
	if queued == nil {
		queued = []pending.Queued{}
	}
	return queued, err
}

// pageOf reads the page of the calls f selects that the request's
// ?cursor= and ?limit= ask for (pending.Desk.Page): a limit that is not a
// whole number from 1 is a 400, one over pending.MaxPageSize is cut to
// it, a cursor not made for the same filter a 400 bad_cursor.
func (h *handler) pageOf(r *http.Request, f pending.Filter) (pending.PageOf, error) {
	limit, err := limitOf(r)
	if err != nil {
		return pending.PageOf{}, err
	}
	return h.Desk.Page(r.Context(), f, r.URL.Query().Get("cursor"), limit)
}

// limitOf returns the request's ?limit= (0 when not given: the default
// page size): a limit that is not a whole number from 1 is a 400.
func limitOf(r *http.Request) (int, error) {
	v := r.URL.Query().Get("limit")
	if v == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		return 0, badRequest("limit is a whole number from 1 (at most %d are listed)", pending.MaxPageSize)
	}
	return n, nil
}

// decisionRequest is the body of a decision; its by is the token's name.
type decisionRequest struct {
	Approved     *bool           `json:"approved"`
	Message      string          `json:"message,omitempty"`
	OverrideArgs json.RawMessage `json:"override_args,omitempty"`
	ArgsDigest   string          `json:"args_digest,omitempty"`
}

// decide publishes a decision (SPEC §11): override arguments are checked
// against the tool's schema before anything is published (422); a call
// that is not pending is 404, one decided already 409.
func (h *handler) decide(w http.ResponseWriter, r *http.Request) error {
	conv, task := r.PathValue("id"), r.PathValue("task")
	var req decisionRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil || req.Approved == nil {
		return badRequest(`the body is not a decision {"approved", "message"?, "override_args"?}`)
	}
	if req.ArgsDigest != "" && !protocol.ValidDigest(req.ArgsDigest) {
		return badRequest("args_digest is not 64 lowercase hex digits (a SHA-256)")
	}
	by := callerOf(r).Name
	if _, err := h.Desk.Decide(r.Context(), conv, task, protocol.Decision{Approved: *req.Approved, Message: req.Message,
		OverrideArgs: req.OverrideArgs, By: by, ArgsDigest: req.ArgsDigest, Channel: protocol.ChannelAPI}); err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"conversation_id": conv, "task_id": task, "approved": *req.Approved, "by": by})
	return nil
}

// answer publishes the answer (an Answer of SPEC §5.2) of a pending
// external call.
func (h *handler) answer(w http.ResponseWriter, r *http.Request) error {
	conv, task := r.PathValue("id"), r.PathValue("task")
	var body json.RawMessage
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil || len(body) == 0 || body[0] != '{' {
		return badRequest(`the body is not an answer {"content"…}`)
	}
	by := callerOf(r).Name
	if _, err := h.Desk.AnswerAs(r.Context(), conv, task, body, by, protocol.ChannelAPI); err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"conversation_id": conv, "task_id": task, "by": by})
	return nil
}
