// Package a2aface is the A2A face of `agent serve` (SPEC §17): each
// agent an A2A 1.0 agent over the JSON-RPC binding, its agent card at
// /a2a/{agent}/.well-known/agent-card.json. A message starts or
// continues a conversation (the A2A context is the conversation, an A2A
// task one turn of it: a prompt to the agent's answer); the task's state
// is the conversation's, read from the core's store on every request,
// so that any replica answers any request and a call decided elsewhere
// (the inbox, the API, the CLI) shows at once: running is
// TASK_STATE_WORKING, paused on people TASK_STATE_INPUT_REQUIRED (its
// status message's data part lists the calls that wait), finished
// TASK_STATE_COMPLETED (the output an artifact), failed
// TASK_STATE_FAILED, cancelled TASK_STATE_CANCELED. A message to a task
// waiting for input, with a data part of decisions and answers, settles
// its calls through the people's desk ([pending.Desk]: the one decision
// path, by the token's name, channel a2a).
//
// Its types, its server interface ([a2asrv.RequestHandler]), its JSON-RPC
// binding and its agent card handler are the official Go SDK's
// (github.com/a2aproject/a2a-go/v2); its tasks' records are kept in the
// core's store behind [Store] (natsjs/facestore.A2ATasks: the service's
// bucket on JetStream), and it imports no NATS code. Package web serves
// it (its route rows, tokens and limits).
package a2aface

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2asrv"

	"github.com/offload-dev/offload/pkg/pending"
	"github.com/offload-dev/offload/pkg/service"
)

// Agent is an agent the face serves: its name and what its card says
// it does.
type Agent struct {
	Name        string
	Description string
}

// Config configures a [Face].
type Config struct {
	// Core runs the conversations. Required.
	Core service.Core
	// Desk lists the calls that wait for people and publishes the
	// decisions and answers given as A2A input. Required.
	Desk *pending.Desk
	// Tasks keeps the A2A tasks' records. Required.
	Tasks Store
	// Threads maps a context ID that is not a ULID to a conversation
	// (the one mapping AG-UI's threads use). Required.
	Threads Threads
	// Agents are the agents served. Required: at least one.
	Agents []Agent
	// Now is the clock of the expiries and the tasks' timestamps.
	// Defaults to time.Now.
	Now func() time.Time
	// Push, if set, serves push notification configs and sends their
	// notifications ([Face.RunPushes]); without it they are the SDK's
	// "push notification not supported" and the cards do not declare
	// them.
	Push *PushOptions
	// Logger receives what goes wrong after an answer began. Defaults
	// to discarding it.
	Logger *slog.Logger
}

// Threads maps the context IDs that are not ULIDs to conversations, in
// the core's store (natsjs/facestore.Threads).
type Threads interface {
	// Conversation returns the conversation thread of agent is mapped
	// to, mapping it to a new conversation ID the first time.
	Conversation(ctx context.Context, agent, thread string) (string, error)
}

// Face serves the A2A protocol for the agents of one core.
type Face struct {
	cfg    Config
	tasks  records
	agents map[string]Agent
	push   *pushes // nil: no push notifications
}

// New returns the face of cfg.
func New(cfg Config) (*Face, error) {
	if cfg.Core == nil || cfg.Desk == nil || cfg.Tasks == nil || cfg.Threads == nil || len(cfg.Agents) == 0 {
		return nil, errors.New("a2aface: Core, Desk, Tasks, Threads and Agents are required")
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	f := &Face{cfg: cfg, tasks: records{cfg.Tasks}, agents: map[string]Agent{}}
	for _, a := range cfg.Agents {
		f.agents[a.Name] = a
	}
	if cfg.Push != nil {
		f.push = newPushes(*cfg.Push)
	}
	return f, nil
}

// Caller is who sends a request (the token's name: the owner of the
// tasks it creates, a decision's by) and what its role lets it do:
// start runs (operator), decide approvals (approver), answer external
// calls (answerer).
type Caller struct {
	Name                  string
	Tenant                string
	Start, Decide, Answer bool
}

// Single returns the agent's name when the face serves one agent (its
// card is then also at /.well-known/agent-card.json), else "".
func (f *Face) Single() string {
	if len(f.cfg.Agents) == 1 {
		return f.cfg.Agents[0].Name
	}
	return ""
}

// Serves reports whether the face serves agent.
func (f *Face) Serves(agent string) bool {
	_, ok := f.agents[agent]
	return ok
}

// SecurityScheme is the name of the bearer scheme the cards declare.
const SecurityScheme = "bearer"

// Card returns the agent card of agent, whose JSON-RPC endpoint is
// base + "/a2a/" + agent (base: the service's public URL, no trailing
// slash); nil when the face does not serve agent.
func (f *Face) Card(agent, base string) *a2a.AgentCard {
	a, ok := f.agents[agent]
	if !ok {
		return nil
	}
	desc := a.Description
	if desc == "" {
		desc = "offload agent " + a.Name
	}
	return &a2a.AgentCard{
		Name:        a.Name,
		Description: desc,
		Version:     "1.0.0",
		SupportedInterfaces: []*a2a.AgentInterface{{URL: strings.TrimSuffix(base, "/") + "/a2a/" + a.Name,
			ProtocolBinding: a2a.TransportProtocolJSONRPC, ProtocolVersion: a2a.Version}},
		Capabilities:       a2a.AgentCapabilities{Streaming: true, PushNotifications: f.push != nil},
		DefaultInputModes:  []string{"text/plain", "application/json"},
		DefaultOutputModes: []string{"text/plain", "application/json"},
		SecuritySchemes: a2a.NamedSecuritySchemes{SecurityScheme: a2a.HTTPAuthSecurityScheme{Scheme: "Bearer",
			Description: "an agent serve API token (SPEC §11): operator to send prompts, approver or answerer (or admin) to settle input"}},
		SecurityRequirements: a2a.SecurityRequirementsOptions{{SecurityScheme: a2a.SecuritySchemeScopes{}}},
		Skills: []a2a.AgentSkill{{ID: a.Name, Name: a.Name, Description: desc, Tags: []string{"offload"},
			InputModes: []string{"text/plain", "application/json"}, OutputModes: []string{"text/plain"}}},
	}
}

// CardHandler serves the card of agent (the SDK's public card handler:
// CORS open, as cards are public); nil when the face does not serve it.
func (f *Face) CardHandler(agent, base string) http.Handler {
	c := f.Card(agent, base)
	if c == nil {
		return nil
	}
	return a2asrv.NewStaticAgentCardHandler(c)
}

// Handler serves the JSON-RPC binding of agent for caller c (the SDK's
// binding over this face's [a2asrv.RequestHandler]), its streams writing
// a keep-alive comment every heartbeat (none: 0); nil when the face does
// not serve agent.
func (f *Face) Handler(agent string, c Caller, heartbeat time.Duration) http.Handler {
	if !f.Serves(agent) {
		return nil
	}
	return a2asrv.NewJSONRPCHandler(f.RequestHandler(agent, c), a2asrv.WithTransportKeepAlive(heartbeat))
}

// RequestHandler returns the A2A request handler of agent for caller c.
func (f *Face) RequestHandler(agent string, c Caller) a2asrv.RequestHandler {
	return &handler{f: f, agent: agent, c: c}
}
