package web

import (
	"cmp"
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/offload-dev/offload/pkg/protocol"
	"github.com/offload-dev/offload/pkg/service"
)

// The JSON API of SPEC §11: POST and GET /v1/conversations, GET
// /v1/conversations/{id}, …/history, …/events (SSE), POST …/messages,
// …/cancel, …/calls/{task}/decision and …/answer, GET /v1/pending,
// /healthz and /readyz. Every /v1 request needs a bearer token (401
// without or with an unknown one, 403 for a role without the right);
// errors are {"error":{"code","message"}}.

// readyTimeout bounds /readyz's look at the core.
const readyTimeout = 2 * time.Second

func (h *handler) healthz(w http.ResponseWriter, _ *http.Request) error {
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	return nil
}

func (h *handler) readyz(w http.ResponseWriter, r *http.Request) error {
	ctx, cancel := context.WithTimeout(r.Context(), readyTimeout)
	defer cancel()
	if err := h.Core.CheckReady(ctx); err != nil {
		return errorf(http.StatusServiceUnavailable, "not_ready", "%s", err.Error())
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ready"})
	return nil
}

// decodeBody decodes r's JSON body (read by the route wrapper, within
// maxBody) into v; an error is the 400 saying what was wanted.
func decodeBody(r *http.Request, v any, want string) error {
	if err := json.NewDecoder(r.Body).Decode(v); err != nil {
		return badRequest("the body is not %s: %s", want, err.Error())
	}
	return nil
}

// startRequest is the body of POST /v1/conversations.
type startRequest struct {
	Agent          string `json:"agent"`
	Prompt         string `json:"prompt"`
	ConversationID string `json:"conversation_id,omitempty"`
	// Tenant is the conversation's tenant (SPEC §19).
	Tenant string `json:"tenant,omitempty"`
}

func (h *handler) start(w http.ResponseWriter, r *http.Request) error {
	var req startRequest
	if err := decodeBody(r, &req, "a JSON object {agent, prompt, conversation_id?, tenant?}"); err != nil {
		return err
	}
	if strings.TrimSpace(req.Prompt) == "" {
		return badRequest("prompt is empty")
	}
	if req.ConversationID != "" {
		if _, err := protocol.ParseID(req.ConversationID); err != nil {
			return badRequest("conversation_id: %s", err.Error())
		}
	}
	ctx, err := tenantContext(r, req.Tenant)
	if err != nil {
		return err
	}
	run, err := h.Core.StartConversation(service.WithStartedBy(ctx, callerOf(r).Name), req.Agent, req.Prompt, req.ConversationID)
	if err != nil {
		return err
	}
	h.answerRun(w, r, run)
	return nil
}

// tenantContext returns r's context asking the core for the tenant of
// the caller's token when it is bound to one, else for asked (a
// request's tenant; none when empty): 400 for a tenant that is not one,
// 403 for a bound token asking for another tenant than its own.
func tenantContext(r *http.Request, asked string) (context.Context, error) {
	if err := protocol.ValidateTenant(asked); err != nil {
		return nil, badRequest("tenant: %s must match %s", strconv.Quote(asked), protocol.TenantPattern)
	}
	c := callerOf(r)
	if c.Tenant != "" && asked != "" && asked != c.Tenant {
		return nil, errorf(http.StatusForbidden, "wrong_tenant", "the token of %s is bound to another tenant than %s", c.Name, asked)
	}
	return service.WithTenant(r.Context(), cmp.Or(c.Tenant, asked)), nil
}

// answerRun answers a run started: 202 with its IDs, or with ?wait=1 200
// with its final event once it has ended.
func (h *handler) answerRun(w http.ResponseWriter, r *http.Request, run *service.Run) {
	if r.URL.Query().Get("wait") != "1" {
		writeJSON(w, http.StatusAccepted, map[string]string{"conversation_id": run.ConversationID, "run_id": run.ID})
		return
	}
	select {
	case <-run.Done():
	case <-r.Context().Done():
		return
	}
	writeJSON(w, http.StatusOK, struct {
		Type string `json:"type"`
		service.Final
	}{"final", run.Final()})
}

func (h *handler) get(w http.ResponseWriter, r *http.Request) error {
	id, err := pathConversation(r)
	if err != nil {
		return err
	}
	c, err := h.Core.Get(r.Context(), id)
	if err != nil {
		return unknownConversation(id, err)
	}
	writeJSON(w, http.StatusOK, c)
	return nil
}

// pathConversation returns the conversation ID of the request's path; a
// malformed one is a 400.
func pathConversation(r *http.Request) (string, error) {
	id := r.PathValue("id")
	if _, err := protocol.ParseID(id); err != nil {
		return "", badRequest("%s", err.Error())
	}
	return id, nil
}
