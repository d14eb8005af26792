package serve

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/offload-dev/offload/pkg/conversation"
	"github.com/offload-dev/offload/pkg/metrics"
	"github.com/offload-dev/offload/pkg/natsjs/convstore"
	"github.com/offload-dev/offload/pkg/protocol"
	"github.com/offload-dev/offload/pkg/session"
)

// Publisher publishes a decision or an answer given over the API, first
// wins, checked against the conversation's pending record
// (convstore.Pending.Publish with the record of the pending bucket).
type Publisher interface {
	Publish(ctx context.Context, kind conversation.ArrivalKind, conv, task string, data []byte) error
	// Decide publishes decision d, bound to the call's arguments as
	// pending (its args_digest) when d carries no digest (SPEC §12).
	Decide(ctx context.Context, conv, task string, d protocol.Decision) error
}

// HandlerConfig configures [Handler].
type HandlerConfig struct {
	// Service runs the conversations. Required.
	Service *Service
	// Tokens are the accepted bearer tokens. Required.
	Tokens Tokens
	// Publisher publishes decisions and answers. Required.
	Publisher Publisher
	// Pending, if set, lists the pending calls (GET /v1/pending) and is
	// what a decision's override arguments are checked against (the
	// pending call's tool schema); without it or Inbox, a decision with
	// override_args is refused (422): nothing unchecked is published.
	Pending PendingReader
	// Logger receives the handler's logs.
	Logger *slog.Logger
	// Metrics, if set, counts the requests (offload_http_requests_total).
	Metrics *metrics.Serve
	// Gatherer, if set, is served on GET /metrics.
	Gatherer prometheus.Gatherer
	// Inbox, if set, serves the web inbox (SPEC §12) at / from the
	// people's pending records, deciding and answering through Publisher.
	Inbox *convstore.Pending
	// Links, if set with Inbox, lets approvers make signed approve/deny
	// links in the inbox, served at /links/ (SPEC §12).
	Links *convstore.Links
}

// Handler returns the HTTP API of SPEC §11 over cfg.Service (and GET
// /metrics with cfg.Gatherer): POST and GET /v1/conversations, GET
// /v1/conversations/{id}, …/history, …/events (SSE), POST …/messages,
// …/cancel, …/calls/{task}/decision and …/answer, GET /v1/pending (with
// cfg.Pending), /healthz and /readyz; every route is registered here,
// on one mux. Every /v1 request needs a bearer token (401 without or
// with an unknown one, 403 for a role without the right); errors are
// {"error":{"code","message"}}.
func Handler(cfg HandlerConfig) http.Handler {
	h := &handler{HandlerConfig: cfg}
	if h.Logger == nil {
		h.Logger = slog.New(slog.DiscardHandler)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	mux.HandleFunc("GET /readyz", h.ready)
	mux.HandleFunc("POST /v1/conversations", h.auth(h.start, RoleOperator))
	mux.HandleFunc("GET /v1/conversations", h.auth(h.list, RoleOperator, RoleApprover, RoleAnswerer, RoleViewer))
	mux.HandleFunc("GET /v1/conversations/{id}", h.auth(h.get, RoleOperator, RoleApprover, RoleAnswerer, RoleViewer))
	mux.HandleFunc("GET /v1/conversations/{id}/events", h.auth(h.events, RoleOperator, RoleApprover, RoleAnswerer, RoleViewer))
	mux.HandleFunc("POST /v1/conversations/{id}/calls/{task}/decision", h.auth(h.decide, RoleApprover))
	mux.HandleFunc("POST /v1/conversations/{id}/calls/{task}/answer", h.auth(h.answer, RoleAnswerer))
	mux.HandleFunc("GET /v1/conversations/{id}/history", h.auth(h.history, RoleOperator, RoleApprover, RoleAnswerer, RoleViewer))
	mux.HandleFunc("POST /v1/conversations/{id}/messages", h.auth(h.message, RoleOperator))
	mux.HandleFunc("POST /v1/conversations/{id}/cancel", h.auth(h.cancel, RoleOperator))
	mux.HandleFunc("GET /v1/pending", h.auth(h.pending, RoleOperator, RoleApprover, RoleAnswerer, RoleViewer))
	if cfg.Gatherer != nil {
		mux.Handle("GET /metrics", metrics.Handler(cfg.Gatherer))
	}
	if cfg.Inbox != nil {
		mountInbox(mux, h)
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		cw := &codeWriter{ResponseWriter: w, code: http.StatusOK}
		mux.ServeHTTP(cw, r)
		route := r.Pattern
		if route == "" {
			route = "unmatched"
		}
		cfg.Metrics.HTTPRequest(route, cw.code)
	})
}

// codeWriter records the status code of a response; it flushes (SSE).
type codeWriter struct {
	http.ResponseWriter
	code int
}

// WriteHeader implements http.ResponseWriter.
func (c *codeWriter) WriteHeader(code int) {
	c.code = code
	c.ResponseWriter.WriteHeader(code)
}

// Flush implements http.Flusher.
func (c *codeWriter) Flush() {
	if f, ok := c.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// readyTimeout bounds /readyz's look at the wake consumers.
const readyTimeout = 2 * time.Second

type handler struct {
	HandlerConfig
}

type identityKey struct{}

// auth lets a request through when its token has one of roles (admin
// always).
func (h *handler) auth(next http.HandlerFunc, roles ...Role) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		id, known := h.Tokens[strings.TrimSpace(tok)]
		if !ok || !known {
			w.Header().Set("WWW-Authenticate", `Bearer realm="offload"`)
			writeError(w, http.StatusUnauthorized, "unauthorized", "a bearer token of --tokens is required")
			return
		}
		if id.Role != RoleAdmin && !slices.Contains(roles, id.Role) {
			writeError(w, http.StatusForbidden, "forbidden", "role "+string(id.Role)+" may not do this")
			return
		}
		next(w, r.WithContext(context.WithValue(r.Context(), identityKey{}, id)))
	}
}

func (h *handler) ready(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), readyTimeout)
	defer cancel()
	if err := h.Service.CheckReady(ctx); err != nil {
		writeError(w, http.StatusServiceUnavailable, "not_ready", err.Error())
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ready"})
}

// startRequest is the body of POST /v1/conversations.
type startRequest struct {
	Agent          string `json:"agent"`
	Prompt         string `json:"prompt"`
	ConversationID string `json:"conversation_id,omitempty"`
}

func (h *handler) start(w http.ResponseWriter, r *http.Request) {
	var req startRequest
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<20)).Decode(&req); err != nil {
		writeError(w, http.StatusBadRequest, "bad_request", "the body is not a JSON object {agent, prompt, conversation_id?}: "+err.Error())
		return
	}
	if strings.TrimSpace(req.Prompt) == "" {
		writeError(w, http.StatusBadRequest, "bad_request", "prompt is empty")
		return
	}
	if req.ConversationID != "" {
		if _, err := protocol.ParseID(req.ConversationID); err != nil {
			writeError(w, http.StatusBadRequest, "bad_request", "conversation_id: "+err.Error())
			return
		}
	}
	run, err := h.Service.Start(r.Context(), req.Agent, req.Prompt, req.ConversationID)
	if err != nil {
		h.startError(w, err)
		return
	}
	h.answerRun(w, r, run)
}

// answerRun answers a run started: 202 with its IDs, or with ?wait=1 200
// with its final event once it has ended.
func (h *handler) answerRun(w http.ResponseWriter, r *http.Request, run *Run) {
	if r.URL.Query().Get("wait") != "1" {
		writeJSON(w, http.StatusAccepted, map[string]string{"conversation_id": run.ConversationID, "run_id": run.ID})
		return
	}
	select {
	case <-run.Done():
	case <-r.Context().Done():
		return
	}
	f := run.Final()
	writeJSON(w, http.StatusOK, struct {
		Type string `json:"type"`
		Final
	}{"final", f})
}

func (h *handler) startError(w http.ResponseWriter, err error) {
	var pe *session.PendingError
	switch {
	case errors.Is(err, ErrUnknownAgent):
		writeError(w, http.StatusNotFound, "unknown_agent", err.Error())
	case errors.Is(err, conversation.ErrNotFound):
		writeError(w, http.StatusNotFound, "not_found", err.Error())
	case errors.Is(err, conversation.ErrClaimed):
		writeError(w, http.StatusConflict, "running", err.Error())
	case errors.As(err, &pe), errors.Is(err, session.ErrNothingToResume):
		writeError(w, http.StatusConflict, "pending", err.Error())
	case errors.Is(err, ErrClosed):
		writeError(w, http.StatusServiceUnavailable, "closing", err.Error())
	default:
		h.Logger.Error("start a conversation", slog.Any("error", err))
		writeError(w, http.StatusInternalServerError, "internal", err.Error())
	}
}

func (h *handler) get(w http.ResponseWriter, r *http.Request) {
	id, ok := pathConversation(w, r)
	if !ok {
		return
	}
	c, err := h.Service.Get(r.Context(), id)
	if err != nil {
		lookupError(w, id, err)
		return
	}
	writeJSON(w, http.StatusOK, c)
}

// decisionRequest is the body of a decision; its by is the token's name.
type decisionRequest struct {
	Approved     *bool           `json:"approved"`
	Message      string          `json:"message,omitempty"`
	OverrideArgs json.RawMessage `json:"override_args,omitempty"`
	ArgsDigest   string          `json:"args_digest,omitempty"`
}

func (h *handler) decide(w http.ResponseWriter, r *http.Request) {
	conv, task := r.PathValue("id"), r.PathValue("task")
	var req decisionRequest
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<20)).Decode(&req); err != nil || req.Approved == nil {
		writeError(w, http.StatusBadRequest, "bad_request", `the body is not a decision {"approved", "message"?, "override_args"?}`)
		return
	}
	if req.ArgsDigest != "" && !protocol.ValidDigest(req.ArgsDigest) {
		writeError(w, http.StatusBadRequest, "bad_request", "args_digest is not 64 lowercase hex digits (a SHA-256)")
		return
	}
	if *req.Approved && len(req.OverrideArgs) > 0 {
		// Override arguments are checked against the tool's schema before
		// anything is published (SPEC §11: 422); a call that is not
		// pending is left to the publish, which says 404 or 409.
		args, err := h.checkArgs(r.Context(), conv, task, string(req.OverrideArgs))
		switch {
		case errors.Is(err, errNotPending):
		case err != nil:
			writeError(w, http.StatusUnprocessableEntity, "invalid_args", err.Error())
			return
		default:
			req.OverrideArgs = args
		}
	}
	id, _ := r.Context().Value(identityKey{}).(Identity)
	err := h.Publisher.Decide(r.Context(), conv, task, protocol.Decision{Approved: *req.Approved, Message: req.Message,
		OverrideArgs: req.OverrideArgs, By: id.Name, ArgsDigest: req.ArgsDigest, Channel: protocol.ChannelAPI})
	if err == nil {
		writeJSON(w, http.StatusOK, map[string]any{"conversation_id": conv, "task_id": task, "approved": *req.Approved, "by": id.Name})
		return
	}
	publishError(w, err)
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, code int, errCode, msg string) {
	writeJSON(w, code, map[string]map[string]string{"error": {"code": errCode, "message": msg}})
}
