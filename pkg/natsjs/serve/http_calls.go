package serve

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"

	"github.com/offload-dev/offload/pkg/conversation"
	"github.com/offload-dev/offload/pkg/deferred"
)

// PendingReader reads the people's pending records (the bucket
// <prefix>_pending; convstore.Pending): what GET /v1/pending lists.
type PendingReader interface {
	// List returns the conversations with a pending record.
	List(ctx context.Context) ([]string, error)
	// Get returns a conversation's pending record (an error wrapping
	// conversation.ErrNotFound when it has none).
	Get(ctx context.Context, id string) (*conversation.Summary, error)
	// Waiting returns the tasks of a record nothing is stored for yet.
	Waiting(ctx context.Context, s *conversation.Summary) ([]deferred.PendingTask, error)
}

// PendingCall is a call of GET /v1/pending: a pending task with its
// conversation, the conversation's agent and last prompt.
type PendingCall struct {
	ConversationID string `json:"conversation_id"`
	Agent          string `json:"agent,omitempty"`
	Prompt         string `json:"prompt,omitempty"`
	deferred.PendingTask
	// Approvals are the approvals counted so far of a call that needs a
	// quorum (Required), as its conversation last saved them.
	Approvals []conversation.Vote `json:"approvals,omitempty"`
}

// pending lists the calls pending across conversations, nothing stored
// for them yet, filtered by ?tool= and ?kind=.
func (h *handler) pending(w http.ResponseWriter, r *http.Request) {
	toolName, kind := r.URL.Query().Get("tool"), deferred.Kind(r.URL.Query().Get("kind"))
	switch kind {
	case "", deferred.KindApproval, deferred.KindExternal, deferred.KindBackground:
	default:
		writeError(w, http.StatusBadRequest, "bad_request", "kind is approval, external or background")
		return
	}
	if h.Pending == nil {
		writeError(w, http.StatusNotImplemented, "not_configured", "this server reads no pending records")
		return
	}
	ids, err := h.Pending.List(r.Context())
	if err != nil {
		writeError(w, http.StatusInternalServerError, "internal", err.Error())
		return
	}
	out := []PendingCall{}
	for _, id := range ids {
		s, err := h.Pending.Get(r.Context(), id)
		if errors.Is(err, conversation.ErrNotFound) {
			continue // resolved meanwhile
		}
		if err != nil {
			writeError(w, http.StatusInternalServerError, "internal", err.Error())
			return
		}
		tasks, err := h.Pending.Waiting(r.Context(), s)
		if err != nil {
			writeError(w, http.StatusInternalServerError, "internal", err.Error())
			return
		}
		for _, t := range tasks {
			if (toolName == "" || t.Tool == toolName) && (kind == "" || t.Kind == kind) {
				out = append(out, PendingCall{ConversationID: id, Agent: s.Agent, Prompt: s.Prompt, PendingTask: t, Approvals: s.State().VotesFor(t.TaskID)})
			}
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{"pending": out})
}

// answer publishes the answer (an Answer of SPEC §5.2) of a pending
// external call.
func (h *handler) answer(w http.ResponseWriter, r *http.Request) {
	conv, task := r.PathValue("id"), r.PathValue("task")
	var body json.RawMessage
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<20)).Decode(&body); err != nil || len(body) == 0 || body[0] != '{' {
		writeError(w, http.StatusBadRequest, "bad_request", `the body is not an answer {"content"…}`)
		return
	}
	err := h.Publisher.Publish(r.Context(), conversation.ArrivalAnswer, conv, task, body)
	if err == nil {
		writeJSON(w, http.StatusOK, map[string]any{"conversation_id": conv, "task_id": task})
		return
	}
	publishError(w, err)
}

// publishError answers a decision or an answer its publisher refused:
// 404 an unknown task, 409 one resolved already or a second approval by
// one identity of a call that needs a quorum, 422 another refusal
// (arguments failing the schema, a stale digest, the wrong kind, an
// approval of such a call unauthenticated).
func publishError(w http.ResponseWriter, err error) {
	var re *conversation.RefusedError
	switch {
	case errors.As(err, &re) && re.Reason == conversation.ReasonDuplicate:
		writeError(w, http.StatusConflict, "already_resolved", err.Error())
	case errors.As(err, &re) && re.Reason == conversation.ReasonDuplicateIdentity:
		writeError(w, http.StatusConflict, re.Reason, err.Error())
	case errors.As(err, &re) && re.Reason == conversation.ReasonUnknownTask:
		writeError(w, http.StatusNotFound, "unknown_task", err.Error())
	case errors.As(err, &re):
		writeError(w, http.StatusUnprocessableEntity, re.Reason, err.Error())
	default:
		writeError(w, http.StatusInternalServerError, "internal", err.Error())
	}
}
