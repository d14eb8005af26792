package mcptool

import (
	"context"

	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"
)

// elicitationCapability is what the client declares of elicitation.
func elicitationCapability() *mcp.ElicitationCapability { return nil }

// elicit answers an elicitation/create.
func (s *Server) elicit(_ context.Context, _ *conn, r transport.JSONRPCRequest) (*transport.JSONRPCResponse, error) {
	return transport.NewJSONRPCErrorResponse(r.ID, mcp.METHOD_NOT_FOUND, "elicitation is not supported by this client", nil), nil
}
