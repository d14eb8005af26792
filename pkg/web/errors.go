package web

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"

	"github.com/offload-dev/offload/pkg/conversation"
	"github.com/offload-dev/offload/pkg/pending"
	"github.com/offload-dev/offload/pkg/service"
	"github.com/offload-dev/offload/pkg/session"
)

// httpError is an error with the answer it gets: a status, the API's
// error code and a message.
type httpError struct {
	status int
	code   string
	msg    string
	// header, if set, is added to the answer (WWW-Authenticate).
	header http.Header
}

func (e *httpError) Error() string { return e.msg }

// errorf is an httpError of status and code with a formatted message.
func errorf(status int, code, format string, args ...any) *httpError {
	return &httpError{status: status, code: code, msg: fmt.Sprintf(format, args...)}
}

// badRequest is a 400 bad_request saying msg.
func badRequest(format string, args ...any) *httpError {
	return errorf(http.StatusBadRequest, "bad_request", format, args...)
}

// unknownConversation is the answer to err of reading conversation id:
// 404 when the store has none, else err.
func unknownConversation(id string, err error) error {
	if errors.Is(err, conversation.ErrNotFound) {
		return errorf(http.StatusNotFound, "not_found", "conversation %s is unknown", id)
	}
	return err
}

// answerOf maps err to its answer: the one mapping of the errors of the
// core, the pending desk and the requests to statuses and the API's
// codes (SPEC §11). Anything else is 500 internal.
func answerOf(err error) *httpError {
	var (
		he *httpError
		re *conversation.RefusedError
		ae *pending.ArgsError
		pe *session.PendingError
		te *session.TenantError
		ce *pending.CursorError
	)
	status, code := http.StatusInternalServerError, "internal"
	switch {
	case errors.As(err, &he):
		return he
	case errors.As(err, &ce), errors.Is(err, service.ErrBadCursor):
		status, code = http.StatusBadRequest, "bad_cursor"
	case errors.As(err, &ae):
		status, code = http.StatusUnprocessableEntity, "invalid_args"
	case errors.As(err, &re) && re.Reason == conversation.ReasonDuplicate:
		status, code = http.StatusConflict, "already_resolved"
	case errors.As(err, &re) && re.Reason == conversation.ReasonDuplicateIdentity:
		status, code = http.StatusConflict, re.Reason
	case errors.As(err, &re) && re.Reason == conversation.ReasonUnknownTask:
		status, code = http.StatusNotFound, "unknown_task"
	case errors.As(err, &re):
		status, code = http.StatusUnprocessableEntity, re.Reason
	case errors.Is(err, service.ErrUnknownAgent):
		status, code = http.StatusNotFound, "unknown_agent"
	case errors.Is(err, conversation.ErrNotFound):
		status, code = http.StatusNotFound, "not_found"
	case errors.Is(err, conversation.ErrClaimed):
		status, code = http.StatusConflict, "running"
	case errors.As(err, &te):
		status, code = http.StatusForbidden, "wrong_tenant"
	case errors.As(err, &pe), errors.Is(err, session.ErrNothingToResume):
		status, code = http.StatusConflict, "pending"
	case errors.Is(err, service.ErrOtherAgent):
		status, code = http.StatusConflict, "other_agent"
	case errors.Is(err, service.ErrNoAgent):
		status, code = http.StatusConflict, "no_agent"
	case errors.Is(err, service.ErrNotRunning):
		status, code = http.StatusConflict, "not_running"
	case errors.Is(err, service.ErrNoDeadLetter):
		status, code = http.StatusNotFound, "no_dead_letter"
	case errors.Is(err, service.ErrNeedsTaskKey):
		status, code = http.StatusConflict, "needs_task_key"
	case errors.Is(err, service.ErrClosed):
		status, code = http.StatusServiceUnavailable, "closing"
	}
	return &httpError{status: status, code: code, msg: err.Error()}
}

// fail answers err as face answers: the API's JSON error, or a page
// saying what went wrong. A 500 is logged.
func (h *handler) fail(w http.ResponseWriter, r *http.Request, f face, err error) {
	if err == errAnswered { //nolint:errorlint // the sentinel itself, never wrapped
		return
	}
	a := answerOf(err)
	if a.status == http.StatusInternalServerError {
		h.Logger.Error("request failed", slog.String("route", r.Pattern), slog.Any("error", err))
	}
	for k, vs := range a.header {
		for _, v := range vs {
			w.Header().Add(k, v)
		}
	}
	if f == page {
		h.message(w, r, a.status, http.StatusText(a.status), a.msg)
		return
	}
	writeError(w, a.status, a.code, a.msg)
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, code int, errCode, msg string) {
	writeJSON(w, code, map[string]map[string]string{"error": {"code": errCode, "message": msg}})
}
