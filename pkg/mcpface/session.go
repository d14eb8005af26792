package mcpface

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"

	"github.com/mark3labs/mcp-go/server"

	"github.com/offload-dev/offload/pkg/protocol"
)

// The session IDs of the face say what the client declared at
// initialize, so that any replica knows it with nothing stored:
// offload-e-<ULID> for a client that can be asked (elicitation),
// offload-n-<ULID> for one that cannot. A session ID is no secret and
// binds nothing: the token does; a client that forges another's only
// misleads the server about itself.
const (
	sessionElicit   = "offload-e-"
	sessionNoElicit = "offload-n-"
)

// elicitKey is the context key of what an initialize request declared.
type elicitKey struct{}

// declaresElicitation reports whether initialize params declare the
// elicitation capability.
func declaresElicitation(params json.RawMessage) bool {
	var p struct {
		Capabilities struct {
			Elicitation json.RawMessage `json:"elicitation"`
		} `json:"capabilities"`
	}
	return json.Unmarshal(params, &p) == nil && len(p.Capabilities.Elicitation) > 0 && string(p.Capabilities.Elicitation) != "null"
}

// sessions resolves the session ID manager of a request: one that mints
// the IDs of what its initialize declared.
type sessions struct{}

// ResolveSessionIdManager implements server.SessionIdManagerResolver.
func (sessions) ResolveSessionIdManager(r *http.Request) server.SessionIdManager { //nolint:revive // mcp-go's interface names it
	if r != nil {
		if elicit, _ := r.Context().Value(elicitKey{}).(bool); elicit {
			return sessionIDs{elicit: true}
		}
	}
	return sessionIDs{}
}

// sessionIDs mints and checks the face's session IDs; it keeps none.
type sessionIDs struct{ elicit bool }

// Generate implements server.SessionIdManager.
func (s sessionIDs) Generate() string {
	if s.elicit {
		return sessionElicit + newTaskID()
	}
	return sessionNoElicit + newTaskID()
}

// Validate implements server.SessionIdManager: any of the face's IDs,
// minted by any replica, or none.
func (sessionIDs) Validate(id string) (bool, error) {
	if id == "" {
		return false, nil
	}
	rest, ok := strings.CutPrefix(id, sessionElicit)
	if !ok {
		rest, ok = strings.CutPrefix(id, sessionNoElicit)
	}
	if _, err := protocol.ParseID(rest); !ok || err != nil {
		return false, errors.New("not a session ID of this server")
	}
	return false, nil
}

// Terminate implements server.SessionIdManager: nothing is kept.
func (sessionIDs) Terminate(string) (bool, error) { return false, nil }

// canElicit reports whether the client of ctx's session declared
// elicitation.
func canElicit(ctx context.Context) (server.SessionWithElicitation, bool) {
	s, ok := server.ClientSessionFromContext(ctx).(server.SessionWithElicitation)
	return s, ok && strings.HasPrefix(s.SessionID(), sessionElicit)
}
