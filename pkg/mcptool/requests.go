package mcptool

import (
	"context"
	"encoding/json"

	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"
)

// SamplingRefused is the message of the error a server's sampling request
// gets: a worker has no model.
const SamplingRefused = "sampling is not supported: this MCP client is an offload worker, which has no model (SPEC §16)"

// serverRequest answers a request of the server: ping, elicitation (see
// elicit), sampling refused, anything else not found.
func (s *Server) serverRequest(ctx context.Context, c *conn, r transport.JSONRPCRequest) (*transport.JSONRPCResponse, error) {
	switch r.Method {
	case string(mcp.MethodPing):
		return transport.NewJSONRPCResultResponse(r.ID, json.RawMessage(`{}`)), nil
	case string(mcp.MethodSamplingCreateMessage):
		s.log.Warn("sampling request refused: a worker has no model")
		return transport.NewJSONRPCErrorResponse(r.ID, mcp.METHOD_NOT_FOUND, SamplingRefused, nil), nil
	case string(mcp.MethodElicitationCreate):
		return s.elicit(ctx, c, r)
	default:
		return transport.NewJSONRPCErrorResponse(r.ID, mcp.METHOD_NOT_FOUND, "method not supported by this client: "+r.Method, nil), nil
	}
}
