// Package mcpface is the MCP face of `agent serve --mcp` (SPEC §17): a
// streamable HTTP MCP server at /mcp whose tools are the service's
// agents. A plain tools/call runs the agent's conversation to its end
// (or to what waits for people, said in its answer); a tools/call with a
// task answers a CreateTaskResult at once, and the task's requests
// (tasks/get, tasks/result, tasks/list, tasks/cancel) are answered from
// the core's store by any replica: the task's record, bound to the token
// that created it, is stored before the answer ([Tasks]), its status is
// the conversation's, and tasks/result asks the calls that wait for
// people as elicitations related to the task, whose answers, posted to
// any replica, go through the people's desk ([pending.Desk]: digest,
// quorum, expiry, by = the token's name, channel mcp).
//
// The MCP library (github.com/mark3labs/mcp-go, stateless streamable
// HTTP) serves everything but the store-backed tasks: JSON-RPC,
// initialize, ping, tools/list and plain tools/call. Package web serves
// the face (POST /mcp: its route row, tokens, limits) and it imports no
// NATS code.
package mcpface

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/offload-dev/offload/pkg/deferred"
	"github.com/offload-dev/offload/pkg/pending"
	"github.com/offload-dev/offload/pkg/service"
	"github.com/offload-dev/offload/pkg/tool"
)

// Agent is an agent the face offers as a tool.
type Agent struct {
	// Name is the agent's name: its tool's.
	Name string
	// Description says what it does (the spec's description, else its
	// instructions' first line).
	Description string
	// Input, if set, is the tool's input schema: the agent calls one
	// fleet tool (agent serve --mcp-tools), and a call's arguments are
	// its prompt, its result the tool's.
	Input json.RawMessage
}

// Tasks keeps the face's task records (natsjs/facestore.MCPTasks): one
// a task, under the key of the token that created it (owner).
type Tasks interface {
	// Create stores rec as task id of owner, once.
	Create(ctx context.Context, owner, id string, rec []byte) error
	// Put replaces the record of task id of owner.
	Put(ctx context.Context, owner, id string, rec []byte) error
	// Get returns the record of task id of owner
	// (conversation.ErrNotFound when owner has none such).
	Get(ctx context.Context, owner, id string) ([]byte, error)
	// List calls fn with each task of owner, until fn returns false.
	List(ctx context.Context, owner string, fn func(id string, rec []byte) bool) error
}

// Config configures a [Face].
type Config struct {
	// Core runs the conversations. Required.
	Core service.Core
	// Desk lists the calls that wait and publishes the elicitations'
	// answers. Required.
	Desk *pending.Desk
	// Tasks keeps the task records. Required.
	Tasks Tasks
	// Agents are the tools offered. Required (at least one).
	Agents []Agent
	// Tools, if set, returns an agent's tool: its description is an
	// approval's elicitation's.
	Tools func(ctx context.Context, agent, tool string) (*tool.Tool, error)
	// Heartbeat is how often a tasks/result stream with nothing to say
	// writes a comment. Defaults to 20 s.
	Heartbeat time.Duration
	// PollInterval is the tasks' suggested pollInterval. Defaults to 1 s.
	PollInterval time.Duration
	// Recheck is how long a tasks/result or a plain call waits for its
	// conversation's next event before it reads its state again.
	// Defaults to 10 s.
	Recheck time.Duration
	// Version is the server's version in initialize. Defaults to "dev".
	Version string
	// Now is the clock of the expiries. Defaults to time.Now.
	Now func() time.Time
	// Logger receives what goes wrong after an answer began. Defaults
	// to discarding it.
	Logger *slog.Logger
}

// Face serves the MCP requests of one core.
type Face struct {
	cfg    Config
	agents map[string]Agent
	mcp    *server.MCPServer
	http   *server.StreamableHTTPServer
}

// New returns the face of cfg.
func New(cfg Config) (*Face, error) {
	if cfg.Core == nil || cfg.Desk == nil || cfg.Tasks == nil || len(cfg.Agents) == 0 {
		return nil, errors.New("mcpface: Core, Desk, Tasks and Agents are required")
	}
	if cfg.Heartbeat <= 0 {
		cfg.Heartbeat = 20 * time.Second
	}
	if cfg.Recheck <= 0 {
		cfg.Recheck = 10 * time.Second
	}
	if cfg.PollInterval <= 0 {
		cfg.PollInterval = time.Second
	}
	if cfg.Version == "" {
		cfg.Version = "dev"
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	f := &Face{cfg: cfg, agents: map[string]Agent{}}
	f.mcp = server.NewMCPServer("offload", cfg.Version,
		server.WithToolCapabilities(false),
		server.WithTaskCapabilities(true, true, true),
		server.WithInstructions("Each tool runs an offload agent on a prompt; with a task, the run is durable and any replica answers it."))
	for _, a := range cfg.Agents {
		f.agents[a.Name] = a
		f.mcp.AddTool(agentTool(a), f.callAgent(a.Name))
	}
	// Every request may reach any replica. The face's tokens
	// guard it, so the library's DNS-rebinding check of loopback Host
	// headers (a proxy's) is not needed.
	// Its session IDs carry what the client declared (sessions): no
	// replica keeps a session.
	f.http = server.NewStreamableHTTPServer(f.mcp, server.WithSessionIdManagerResolver(sessions{}), server.WithDisableLocalhostProtection(true),
		server.WithStreamableHTTPLogger(cfg.Logger))
	return f, nil
}

// agentTool is agent a's tool.
func agentTool(a Agent) mcp.Tool {
	if len(a.Input) > 0 {
		t := mcp.NewToolWithRawSchema(a.Name, a.Description, a.Input)
		t.Execution = &mcp.ToolExecution{TaskSupport: mcp.TaskSupportOptional}
		return t
	}
	desc := a.Description
	if desc == "" {
		desc = "The offload agent " + a.Name + "."
	}
	return mcp.NewTool(a.Name, mcp.WithDescription(desc),
		mcp.WithString("prompt", mcp.Required(), mcp.Description("what to ask the agent")),
		mcp.WithString("conversation_id", mcp.Description("the conversation to continue (a previous answer's conversation_id); a new one when absent")),
		mcp.WithTaskSupport(mcp.TaskSupportOptional))
}

// Caller is who sends a request: the token's name (a decision's by), its
// key (what its tasks are bound to: hex) and what its role lets it do:
// call the agents (operator), decide approvals (approver), answer
// external calls (answerer).
type Caller struct {
	Name, Owner           string
	Start, Decide, Answer bool
}

// settles reports whether c may settle a call of kind: decide an
// approval, answer an external call.
func (c Caller) settles(kind deferred.Kind) bool {
	switch kind {
	case deferred.KindApproval:
		return c.Decide
	case deferred.KindExternal:
		return c.Answer
	}
	return false
}

type callerKey struct{}

// WithCaller returns ctx saying who sends the request ServeHTTP serves.
func WithCaller(ctx context.Context, c Caller) context.Context {
	return context.WithValue(ctx, callerKey{}, c)
}

// callerOf is the caller ctx says (none: the zero Caller, who may do
// nothing).
func callerOf(ctx context.Context) Caller {
	c, _ := ctx.Value(callerKey{}).(Caller)
	return c
}

// message is what the face reads of a JSON-RPC message to route it.
type message struct {
	ID     json.RawMessage `json:"id"`
	Method string          `json:"method"`
	Params json.RawMessage `json:"params"`
	Result json.RawMessage `json:"result"`
	Error  json.RawMessage `json:"error"`
}

// ServeHTTP serves one POST to /mcp from the caller its context says
// ([WithCaller]): the task requests and the answers of the face's
// elicitations here, from the store, everything else by the MCP library.
func (f *Face) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, "the body could not be read", http.StatusBadRequest)
		return
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	var m message
	if r.Method == http.MethodPost && json.Unmarshal(body, &m) == nil {
		ctx := r.Context()
		switch {
		case m.Method == "" && len(m.ID) > 0 && (m.Result != nil || m.Error != nil) && isElicitationID(m.ID):
			f.elicitationAnswer(ctx, w, m)
			return
		case m.Method == string(mcp.MethodTasksGet):
			f.reply(w, m.ID, f.getTask(ctx, m.Params))
			return
		case m.Method == string(mcp.MethodTasksList):
			f.reply(w, m.ID, f.listTasks(ctx))
			return
		case m.Method == string(mcp.MethodTasksCancel):
			f.reply(w, m.ID, f.cancelTask(ctx, m.Params))
			return
		case m.Method == string(mcp.MethodTasksResult):
			f.taskResult(ctx, w, m)
			return
		case m.Method == string(mcp.MethodToolsCall) && hasTask(m.Params):
			f.reply(w, m.ID, f.createTask(ctx, m.Params))
			return
		}
	}
	if m.Method == string(mcp.MethodInitialize) {
		r = r.WithContext(context.WithValue(r.Context(), elicitKey{}, declaresElicitation(m.Params)))
	}
	// A plain call runs as long as its conversation: the write deadline
	// is set again ahead of the answer's first write (package web).
	_ = http.NewResponseController(w).SetWriteDeadline(time.Time{})
	f.http.ServeHTTP(w, r)
}

// hasTask reports whether a tools/call's params ask for a task.
func hasTask(params json.RawMessage) bool {
	var p struct {
		Task json.RawMessage `json:"task"`
	}
	return json.Unmarshal(params, &p) == nil && len(p.Task) > 0 && string(p.Task) != "null"
}

// rpcError is a JSON-RPC error the face answers.
type rpcError struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

func (e *rpcError) Error() string { return e.Message }

func invalidParams(format string, args ...any) *rpcError {
	return &rpcError{Code: mcp.INVALID_PARAMS, Message: fmt.Sprintf(format, args...)}
}

// forbidden is a request the caller's role may not make.
func forbidden(format string, args ...any) *rpcError {
	return &rpcError{Code: mcp.INVALID_REQUEST, Message: "forbidden: " + fmt.Sprintf(format, args...)}
}

// answer is a method's result, or its error.
type answer struct {
	result any
	err    error
}

// reply writes the JSON-RPC response of id: a's result or error.
func (f *Face) reply(w http.ResponseWriter, id json.RawMessage, a answer) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(responseOf(id, a))
}

// responseOf is the JSON-RPC response of id with a's result or error (an
// error not the face's own is an internal error).
func responseOf(id json.RawMessage, a answer) map[string]any {
	if a.err == nil {
		return map[string]any{"jsonrpc": "2.0", "id": id, "result": a.result}
	}
	var re *rpcError
	if !errors.As(a.err, &re) {
		re = &rpcError{Code: mcp.INTERNAL_ERROR, Message: a.err.Error()}
	}
	return map[string]any{"jsonrpc": "2.0", "id": id, "error": re}
}

// callArgs are an agent tool's arguments.
type callArgs struct {
	Prompt         string `json:"prompt"`
	ConversationID string `json:"conversation_id"`
}

// args are the arguments raw of a call of a: an agent's {prompt,
// conversation_id?}; a fleet tool's arguments are its prompt.
func (a Agent) args(raw json.RawMessage) (callArgs, error) {
	if len(a.Input) > 0 {
		if len(raw) == 0 || string(raw) == "null" {
			raw = json.RawMessage("{}")
		}
		return callArgs{Prompt: string(raw)}, nil
	}
	var out callArgs
	if err := json.Unmarshal(raw, &out); err != nil {
		return out, invalidParams("arguments: %v", err)
	}
	if strings.TrimSpace(out.Prompt) == "" {
		return out, invalidParams("prompt is empty")
	}
	return out, nil
}
