package web

import (
	"net/http"
	"strings"

	"github.com/offload-dev/offload/pkg/a2aface"
)

// a2aCard serves GET /a2a/{agent}/.well-known/agent-card.json, and GET
// /.well-known/agent-card.json when the face serves one agent (SPEC
// §17): the agent's card, public (the SDK's card handler), its endpoint
// under the service's public URL.
func (h *handler) a2aCard(w http.ResponseWriter, r *http.Request) error {
	agent := r.PathValue("agent")
	if agent == "" {
		agent = h.A2A.Single()
	}
	card := h.A2A.CardHandler(agent, h.baseURL(r))
	if card == nil {
		return errorf(http.StatusNotFound, "not_found", "no agent %q is served over A2A", agent)
	}
	card.ServeHTTP(w, r)
	return nil
}

// a2aRPC serves POST /a2a/{agent} (SPEC §17): the A2A JSON-RPC binding
// (the SDK's) over package a2aface's handler for the caller. The row
// admits any role (a token reads its own tasks); a2aface refuses what
// the caller's role may not do: a prompt needs operator, a decision
// approver, an answer answerer (admin: all).
func (h *handler) a2aRPC(w http.ResponseWriter, r *http.Request) error {
	c := callerOf(r)
	caller := a2aface.Caller{Name: c.Name, Tenant: c.Tenant, Start: c.may(operators...), Decide: c.may(approvers...), Answer: c.may(answerers...)}
	rpc := h.A2A.Handler(r.PathValue("agent"), caller, h.Limits.Heartbeat)
	if rpc == nil {
		return errorf(http.StatusNotFound, "not_found", "no agent %q is served over A2A", r.PathValue("agent"))
	}
	rpc.ServeHTTP(w, r)
	return nil
}

// baseURL is the service's public URL, else the request's own origin.
func (h *handler) baseURL(r *http.Request) string {
	if h.PublicURL != "" {
		return strings.TrimSuffix(h.PublicURL, "/")
	}
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	return scheme + "://" + r.Host
}
