// Package agui is the AG-UI face of `agent serve` (SPEC §18): it
// translates an AG-UI RunAgentInput into calls of the core
// ([service.Core]: start or continue a conversation, watch its events)
// and of the people's desk ([pending.Desk]: the decisions and answers of
// a resume), and the core's run events (SPEC §6.3) into AG-UI events,
// a pause on people into a RUN_FINISHED whose outcome is interrupts.
//
// Its types are the AG-UI Go SDK's (core/types, core/events); package
// web serves it (POST /agui/{agent}: its route row, tokens, limits and
// Server-Sent Events writer) and it imports no NATS code. What it keeps
// beyond a request lives in the core's store: a thread ID that is not a
// ULID is mapped to a conversation there ([Threads]), so any replica
// continues any thread.
package agui

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/ag-ui-protocol/ag-ui/sdks/community/go/pkg/core/events"
	"github.com/ag-ui-protocol/ag-ui/sdks/community/go/pkg/core/types"

	"github.com/offload-dev/offload/pkg/conversation"
	"github.com/offload-dev/offload/pkg/pending"
	"github.com/offload-dev/offload/pkg/protocol"
	"github.com/offload-dev/offload/pkg/service"
	"github.com/offload-dev/offload/pkg/tool"
)

// Threads maps the thread IDs that are not ULIDs to conversations, in
// the core's store (natsjs/facestore.Threads).
type Threads interface {
	// Conversation returns the conversation thread of agent is mapped
	// to, mapping it to a new conversation ID the first time.
	Conversation(ctx context.Context, agent, thread string) (string, error)
}

// Config configures a [Face].
type Config struct {
	// Core runs the conversations. Required.
	Core service.Core
	// Desk publishes the decisions and answers of the resumes and tells
	// the calls' expiry. Required.
	Desk *pending.Desk
	// Threads maps the thread IDs that are not ULIDs. Required.
	Threads Threads
	// Tools, if set, returns an agent's tool: its parameters' schema is
	// an approval interrupt's schema of override_args.
	Tools func(ctx context.Context, agent, tool string) (*tool.Tool, error)
	// Now is the clock of the expiries. Defaults to time.Now.
	Now func() time.Time
	// Logger receives what goes wrong after a stream opened. Defaults to
	// discarding it.
	Logger *slog.Logger
}

// Face serves AG-UI inputs over one core.
type Face struct {
	cfg Config
}

// New returns the face of cfg.
func New(cfg Config) (*Face, error) {
	if cfg.Core == nil || cfg.Desk == nil || cfg.Threads == nil {
		return nil, errors.New("agui: Core, Desk and Threads are required")
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Face{cfg: cfg}, nil
}

// Caller is who sends an input (the token's name: a decision's by) and
// what their role lets them do: start and continue runs (operator),
// decide approvals (approver), answer external calls (answerer).
type Caller struct {
	Name                  string
	Start, Decide, Answer bool
}

// Emit writes one event of the stream, with its SSE id when id is set.
type Emit func(id string, ev events.Event) error

// InputError is an input refused before its stream opens: the HTTP
// status, the API's error code and what is wrong.
type InputError struct {
	Status  int
	Code    string
	Message string
}

func (e *InputError) Error() string { return e.Message }

func badInput(format string, args ...any) *InputError {
	return &InputError{Status: http.StatusBadRequest, Code: "bad_request", Message: fmt.Sprintf(format, args...)}
}

func forbidden(format string, args ...any) *InputError {
	return &InputError{Status: http.StatusForbidden, Code: "forbidden", Message: fmt.Sprintf(format, args...)}
}

// Run serves in, sent by c to agent: a new turn on the input's last user
// message, or the decisions and answers of its resume entries, and the
// stream of what the core does with them until the conversation's run
// ends (RUN_FINISHED, with interrupts when it pauses on people) or fails
// (RUN_ERROR). It returns an error (an *InputError, or the core's) only
// before anything was emitted; afterwards what goes wrong is a RUN_ERROR,
// and the error returned is emit's (the client went) or ctx's.
func (f *Face) Run(ctx context.Context, agent string, c Caller, in types.RunAgentInput, emit Emit) error {
	if strings.TrimSpace(in.ThreadID) == "" {
		return badInput("threadId is empty")
	}
	if in.RunID == "" {
		in.RunID = protocol.NewID()
	}
	var prompt string
	answers := toolMessages(in.Messages)
	switch {
	case len(in.Resume) > 0:
		if err := checkResume(in.Resume); err != nil {
			return err
		}
	case len(answers) > 0:
		// The frontend's results of its tools' calls (SPEC §18).
		if !c.Answer {
			return forbidden("only an answerer answers a frontend tool's call")
		}
	default:
		if !c.Start {
			return forbidden("only an operator starts a run")
		}
		var err error
		if prompt, err = lastPrompt(in.Messages); err != nil {
			return err
		}
	}
	conv, err := f.conversation(ctx, agent, in.ThreadID)
	if err != nil {
		return err
	}
	st, err := f.cfg.Core.State(ctx, conv)
	switch {
	case errors.Is(err, conversation.ErrNotFound):
		st = nil
	case err != nil:
		return err
	case st.Agent != nil && st.Agent.Name != agent:
		return &InputError{Status: http.StatusConflict, Code: "other_agent", Message: fmt.Sprintf("thread %s is not agent %s's", in.ThreadID, agent)}
	case service.Tenant(ctx) != "" && st.Tenant != service.Tenant(ctx):
		// A caller bound to a tenant (service.WithTenant) runs, resumes
		// and answers its tenant's threads only, as over the API.
		return &InputError{Status: http.StatusForbidden, Code: "wrong_tenant", Message: fmt.Sprintf("thread %s is not tenant %s's", in.ThreadID, service.Tenant(ctx))}
	}
	tools, err := f.frontendTools(ctx, agent, in.Tools)
	if err != nil {
		return err
	}
	s := &stream{f: f, ctx: ctx, emit: emit, thread: in.ThreadID, run: in.RunID, conv: conv, agent: agent}
	if err := s.send(events.NewRunStartedEvent(in.ThreadID, in.RunID)); err != nil {
		return err
	}
	if err := s.send(events.NewCustomEvent(eventConversation, events.WithValue(map[string]string{"conversation_id": conv}))); err != nil {
		return err
	}
	if len(in.Resume) > 0 {
		return s.resume(st, c, in.Resume)
	}
	if len(answers) > 0 {
		entries, ended, err := s.toolAnswers(st, answers)
		if ended {
			return err // refused: a RUN_ERROR was sent
		}
		return s.resume(st, c, entries)
	}
	if prompt == "" {
		// The input's last user message is already the conversation's:
		// the history sent again starts nothing.
		return s.fromStore("", nil)
	}
	return s.follow(func() (bool, error) {
		// The input's tools replace the thread's (none: it has none).
		ctx := service.WithFrontendTools(service.WithStartedBy(ctx, c.Name), tools)
		_, err := f.cfg.Core.StartThread(ctx, agent, prompt, conv)
		return err == nil, err
	})
}

// The names of the CUSTOM events of this face.
const (
	// eventConversation tells the conversation of the thread, after
	// RUN_STARTED.
	eventConversation = "offload.conversation"
	// eventProgress is a worker's progress report (SPEC §6.3 progress).
	eventProgress = "offload.progress"
	// eventBackground is a background task started.
	eventBackground = "offload.background"
	// eventRetry says the deltas of the step's last attempt are void.
	eventRetry = "offload.retry"
)

// conversation returns the conversation of thread: the thread itself
// when it is a ULID, else its mapping.
func (f *Face) conversation(ctx context.Context, agent, thread string) (string, error) {
	if _, err := protocol.ParseID(thread); err == nil {
		return thread, nil
	}
	return f.cfg.Threads.Conversation(ctx, agent, thread)
}

// lastPrompt returns the text of msgs' last message, a user message:
// the prompt of a new turn ("" when that message is one of a
// conversation's own, as a snapshot named it: nothing new). An input
// whose last message is not a user message is refused.
func lastPrompt(msgs []types.Message) (string, error) {
	if len(msgs) == 0 || msgs[len(msgs)-1].Role != types.RoleUser {
		return "", badInput("the input's last message is not a user message (and it has no resume)")
	}
	m := msgs[len(msgs)-1]
	if isOurs(m.ID) {
		return "", nil
	}
	text, err := userText(m.Content)
	if err != nil {
		return "", err
	}
	if strings.TrimSpace(text) == "" {
		return "", badInput("the last user message has no text")
	}
	return text, nil
}

// userText is the text of a user message's content: a string, or the
// text parts of a list of input contents.
func userText(content any) (string, error) {
	switch c := content.(type) {
	case string:
		return c, nil
	case []any:
		var b strings.Builder
		for _, part := range c {
			m, ok := part.(map[string]any)
			if !ok {
				return "", badInput("a user message's content part is not an object")
			}
			if m["type"] != types.InputContentTypeText {
				return "", badInput("only text content is served (a part is %v)", m["type"])
			}
			s, _ := m["text"].(string)
			b.WriteString(s)
		}
		return b.String(), nil
	case nil:
		return "", nil
	}
	return "", badInput("a user message's content is neither text nor a list of parts")
}

// checkResume checks the form of resume entries.
func checkResume(entries []types.ResumeEntry) error {
	seen := map[string]bool{}
	for _, e := range entries {
		if _, err := protocol.ParseID(e.InterruptID); err != nil {
			return badInput("resume: interruptId %q is not an interrupt of this face (a task ULID)", e.InterruptID)
		}
		if seen[e.InterruptID] {
			return badInput("resume: interrupt %s is addressed twice", e.InterruptID)
		}
		seen[e.InterruptID] = true
		if e.Status != types.ResumeStatusResolved && e.Status != types.ResumeStatusCancelled {
			return badInput("resume: interrupt %s: status is resolved or cancelled", e.InterruptID)
		}
	}
	return nil
}
