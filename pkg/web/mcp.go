package web

import (
	"crypto/sha256"
	"encoding/hex"
	"net/http"

	"github.com/offload-dev/offload/pkg/mcpface"
	"github.com/offload-dev/offload/pkg/service"
)

// mcp serves POST /mcp (SPEC §17): the MCP face, given the caller (its
// token's name, the key its tasks are bound to: a digest of the token,
// and what its role lets it do; package mcpface refuses the rest with
// the protocol's errors).
func (h *handler) mcp(w http.ResponseWriter, r *http.Request) error {
	c := callerOf(r)
	sum := sha256.Sum256([]byte("offload mcp task owner\x00" + c.token))
	ctx := mcpface.WithCaller(r.Context(), mcpface.Caller{Name: c.Name, Owner: hex.EncodeToString(sum[:16]),
		Start: c.may(operators...), Decide: c.may(approvers...), Answer: c.may(answerers...)})
	if c.Tenant != "" {
		// A token bound to a tenant starts its tenant's conversations, and
		// continues no other's (SPEC §19).
		ctx = service.WithTenant(ctx, c.Tenant)
	}
	h.MCP.ServeHTTP(w, r.WithContext(ctx))
	return nil
}
