// Package service is the contract between `agent serve`'s core and its
// faces. The core (natsjs/serve: replicas over JetStream that start, wake
// and continue conversations) implements [Core]; the faces (package web:
// the HTTP API and the web inbox; the protocol faces to come) call it and
// know nothing of NATS. It holds the views the core answers with ([Run],
// [Final], [Conversation]) and the errors faces branch on.
package service

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/offload-dev/offload/pkg/conversation"
	"github.com/offload-dev/offload/pkg/deferred"
)

// Core is what the faces of `agent serve` ask of its core (SPEC §11).
// Every replica answers every call: conversations are the store's, not a
// replica's.
type Core interface {
	// StartConversation starts a run of the agent named agent on
	// prompt: a new conversation, or the stored conversation id (one
	// with nothing pending) when id is set. It returns once the
	// conversation is claimed and recorded; the run goes on in the core.
	StartConversation(ctx context.Context, agent, prompt, id string) (*Run, error)
	// Continue starts a run of stored conversation id, one with nothing
	// pending, on prompt, with the agent it records (ErrNoAgent for one
	// that records none; a *conversation.ClaimedError while a run of it
	// is live; a *session.PendingError while calls wait).
	Continue(ctx context.Context, id, prompt string) (*Run, error)
	// StartThread starts a run of agent on prompt in conversation id:
	// created with that ID when the store holds none (a protocol face's
	// thread, SPEC §18), else continued as Continue does (ErrOtherAgent
	// when it records another agent).
	StartThread(ctx context.Context, agent, prompt, id string) (*Run, error)
	// Cancel interrupts the live run of conversation id wherever it runs
	// (conversation.ErrNotFound for one the service never ran,
	// ErrNotRunning when no run of it is live).
	Cancel(ctx context.Context, id string) error
	// Get returns the view of conversation id (conversation.ErrNotFound
	// for an unknown one).
	Get(ctx context.Context, id string) (*Conversation, error)
	// State returns the stored state of conversation id: its history,
	// its agent and what it waits for (conversation.ErrNotFound for an
	// unknown one).
	State(ctx context.Context, id string) (*conversation.State, error)
	// List calls fn with the status of every conversation the status
	// index holds, of status only when status is set.
	List(ctx context.Context, status string, fn func(conversation.Status) error) error
	// ListPage returns a page of at most limit conversations of the
	// status index (of status only when status is set), the latest
	// changed first, from cursor (the Next of the page before, for the
	// same status; "" for the first page): read from an index, not the
	// whole status index (SPEC §21). A cursor not made for status wraps
	// ErrBadCursor.
	ListPage(ctx context.Context, status, cursor string, limit int) (*ConversationsPage, error)
	// StatusCounts returns how many conversations the status index holds
	// of each status, as stored.
	StatusCounts(ctx context.Context) (map[string]int, error)
	// Watch calls fn with each event of conversation conv stored after
	// sequence after (0: from now on), in order, until fn returns false,
	// the conversation's next final event has been given, or ctx ends.
	// ready, if set, is called once the watch has begun: no event stored
	// after it is missed.
	Watch(ctx context.Context, conv string, after uint64, ready func(), fn func(seq uint64, event json.RawMessage) bool) error
	// Recent calls fn with the stored events of conversation conv since
	// time since, in order, until fn returns false or the stored ones
	// (a bounded number) are given: it does not wait for more. The
	// conversation's page shows with them what its saved history does
	// not hold yet (the calls of a live run and their progress).
	Recent(ctx context.Context, conv string, since time.Time, fn func(event json.RawMessage) bool) error
	// CheckReady returns nil when the core wakes conversations, else
	// what is missing.
	CheckReady(ctx context.Context) error
}

// The errors of [Core], for the faces to branch on.
var (
	// ErrUnknownAgent: StartConversation named an agent this replica does not serve.
	ErrUnknownAgent = errors.New("serve: unknown agent")
	// ErrClosed: the core is stopping.
	ErrClosed = errors.New("serve: closed")
	// ErrNoAgent: Continue of a conversation that records no agent (one
	// not started by agent serve).
	ErrNoAgent = errors.New("serve: the conversation records no agent")
	// ErrOtherAgent: StartThread of a conversation of another agent.
	ErrOtherAgent = errors.New("serve: the conversation is another agent's")
	// ErrNotRunning: Cancel of a conversation no run of which is live.
	ErrNotRunning = errors.New("serve: no run of the conversation is live")
	// ErrBadCursor is the refusal of a cursor of the conversations' pages
	// that the core did not make for the same status: garbled, altered,
	// or of another list.
	ErrBadCursor = errors.New("not a cursor of this list: pass the next cursor of the page before, with the same status")
)

// ErrCancelled is the cause of a run interrupted by [Core.Cancel]
// (errors.Is context.Canceled): SIGINT's semantics, its live tasks
// cancelled, its state saved, the run failed with this error.
var ErrCancelled error = cancelledError{}

type cancelledError struct{}

func (cancelledError) Error() string { return "cancelled over the API" }

func (cancelledError) Is(target error) bool { return target == context.Canceled }

// startedByKey is the context key of [WithStartedBy].
type startedByKey struct{}

// WithStartedBy returns ctx saying who asks the core (a face's
// authenticated caller: the name of an API or inbox token): a
// conversation [Core.StartConversation] creates with it records them as
// the one who started it (conversation.State.StartedBy, SPEC §21).
func WithStartedBy(ctx context.Context, who string) context.Context {
	return context.WithValue(ctx, startedByKey{}, who)
}

// StartedBy returns who ctx says asks the core ([WithStartedBy]); "" when
// it says nobody.
func StartedBy(ctx context.Context) string {
	who, _ := ctx.Value(startedByKey{}).(string)
	return who
}

// tenantKey is the context key of [WithTenant].
type tenantKey struct{}

// WithTenant returns ctx saying the tenant (SPEC §19) the caller asks the
// core for: a conversation [Core.StartConversation] creates with it
// carries it (conversation.State.Tenant), and a stored conversation
// started or continued with it must have it (else a
// *session.TenantError). A face gives the tenant its caller's token is
// bound to, else the one the request names.
func WithTenant(ctx context.Context, tenant string) context.Context {
	return context.WithValue(ctx, tenantKey{}, tenant)
}

// Tenant returns the tenant ctx asks for ([WithTenant]); "" when none.
func Tenant(ctx context.Context) string {
	t, _ := ctx.Value(tenantKey{}).(string)
	return t
}

// Final is how a run ended: the §6.3 final event's information.
type Final struct {
	// ConversationID is the conversation.
	ConversationID string `json:"conversation_id"`
	// RunID identifies the run.
	RunID string `json:"run_id"`
	// Status is "finished", "paused" or "failed".
	Status string `json:"status"`
	// Output is the final text of a finished run.
	Output string `json:"output,omitempty"`
	// Pending are the calls a paused run waits for.
	Pending []deferred.PendingTask `json:"pending,omitempty"`
	// Error says why a run failed.
	Error string `json:"error,omitempty"`
}

// Run is a live run of a conversation.
type Run struct {
	// ConversationID is the conversation.
	ConversationID string
	// ID identifies the run.
	ID    string
	done  chan struct{}
	final Final
}

// NewRun returns the run id of conversation conv, and the function the
// core calls once, when the run has ended and its state is saved.
func NewRun(conv, id string) (*Run, func(Final)) {
	r := &Run{ConversationID: conv, ID: id, done: make(chan struct{})}
	return r, func(f Final) {
		r.final = f
		close(r.done)
	}
}

// Done is closed when the run has ended and its state is saved.
func (r *Run) Done() <-chan struct{} { return r.done }

// Final returns how the run ended; valid once Done is closed.
func (r *Run) Final() Final { return r.final }

// Conversation is what GET /v1/conversations/{id} shows of a stored
// conversation (SPEC §11).
type Conversation struct {
	ConversationID string `json:"conversation_id"`
	// Agent is the name of the conversation's agent ("" for one not
	// started by agent serve).
	Agent string `json:"agent"`
	// Status is "paused" (calls pending), "failed" (its last run ended
	// with an error), "finished" (its history ends with the model's
	// answer), "running" (a run of it is live) or "paused" also when its
	// history waits for the model or a tool but no process holds it.
	Status string `json:"status"`
	// Pending are the calls it waits for, nothing arrived for them yet.
	Pending []deferred.PendingTask `json:"pending"`
	// Output is the text of the last model response.
	Output    string    `json:"output"`
	UpdatedAt time.Time `json:"updated_at"`
	// Note says why this replica does not continue it, when it lacks its
	// agent.
	Note string `json:"note,omitempty"`
	// Error, for a failed one, says why its last run failed.
	Error string `json:"error,omitempty"`
	// StartedBy is who started it (conversation.State.StartedBy).
	StartedBy string `json:"started_by,omitempty"`
	// Tenant is its tenant (conversation.State.Tenant), when it has one.
	Tenant string `json:"tenant,omitempty"`
}

// ConversationsPage is a page of the conversations' statuses
// ([Core.ListPage]).
type ConversationsPage struct {
	// Conversations are the page's, the latest changed first.
	Conversations []conversation.Status
	// Next is the cursor of the next page; empty on the last.
	Next string
}

// frontendToolsKey is the context key of [WithFrontendTools].
type frontendToolsKey struct{}

// WithFrontendTools returns ctx giving the core the tools a frontend
// offers the model (SPEC §18, an AG-UI input's tools, checked by the
// face): the conversation [Core.StartThread] starts or continues with it
// records them in place of those it had (none, when tools is empty), and
// its runs offer them on any replica until the next input replaces
// them.
func WithFrontendTools(ctx context.Context, tools []conversation.FrontendTool) context.Context {
	return context.WithValue(ctx, frontendToolsKey{}, tools)
}

// FrontendTools returns the tools ctx gives ([WithFrontendTools]) and
// whether it gives any set (an empty one included).
func FrontendTools(ctx context.Context) ([]conversation.FrontendTool, bool) {
	tools, ok := ctx.Value(frontendToolsKey{}).([]conversation.FrontendTool)
	return tools, ok
}
