package agent

import (
	"context"
	"fmt"
	"iter"
	"log/slog"

	"go.opentelemetry.io/otel/trace"

	"github.com/offload-dev/offload/pkg/deferred"
	"github.com/offload-dev/offload/pkg/llm"
	"github.com/offload-dev/offload/pkg/message"
	"github.com/offload-dev/offload/pkg/telemetry"
	"github.com/offload-dev/offload/pkg/tool"
)

// DefaultRequestLimit is the request limit when none is set.
const DefaultRequestLimit = 50

// UsageLimits bound a run. A nil field means no limit, except Requests,
// which defaults to DefaultRequestLimit.
type UsageLimits struct {
	// Requests caps model requests. Defaults to 50; use Unlimited for none.
	Requests *int
	// ToolCalls caps successful tool calls, checked per batch before any call
	// of the batch runs.
	ToolCalls *int
	// InputTokens, OutputTokens and TotalTokens cap token usage, checked after
	// each response.
	InputTokens, OutputTokens, TotalTokens *int
}

// Limit returns a pointer to n, for UsageLimits fields.
func Limit(n int) *int { return &n }

// Unlimited disables the request limit: UsageLimits{Requests: Unlimited()}.
func Unlimited() *int { return Limit(-1) }

// Config configures an [Agent].
type Config struct {
	// Model answers the requests. Required.
	Model llm.Model
	// Toolsets provide the tools offered to the model.
	Toolsets []tool.Toolset
	// Instructions is the system prompt of a new conversation.
	Instructions string
	// Capabilities extend every run, in order.
	Capabilities []Capability
	// Limits bound every run unless the run overrides them.
	Limits UsageLimits
	// AllowDeferred lets runs end with DeferredToolRequests (a pause).
	// Without it (on the agent or the run), unresolved deferred calls are an
	// error.
	AllowDeferred bool
	// FailOnToolError makes an unexpected tool error end the run instead of
	// being reported to the model as {"error":"<type>"}.
	FailOnToolError bool
	// Stream makes model requests streamed (text_delta events).
	Stream bool
	// Settings are passed to the model with every request.
	Settings llm.Settings
	// Logger receives the run's logs. Defaults to discarding them.
	Logger *slog.Logger
	// TracerProvider, if set, records the spans of SPEC §14: the run
	// (invoke_agent), each model request (chat) and each tool call
	// (execute_tool), with the GenAI semantic conventions' attributes.
	// Nil records none (no global provider is read).
	TracerProvider trace.TracerProvider
}

// Agent runs conversations with a model and tools. It is safe for
// concurrent use; each run has its own state.
type Agent struct {
	cfg    Config
	log    *slog.Logger
	tracer trace.Tracer
}

// New returns an agent. It fails with ErrInvalidConfig when no model is set.
func New(cfg Config) (*Agent, error) {
	if cfg.Model == nil {
		return nil, fmt.Errorf("%w: Model is required", ErrInvalidConfig)
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Agent{cfg: cfg, log: log, tracer: telemetry.Tracer(cfg.TracerProvider)}, nil
}

// RunOptions are per-run options. The zero value starts a new conversation.
type RunOptions struct {
	// History continues a conversation.
	History message.History
	// DeferredResults answers the deferred calls the history ended with.
	DeferredResults *deferred.Results
	// ConversationID overrides the conversation ID (default: the latest one
	// in History, else a new ULID).
	ConversationID string
	// Tenant is the conversation's tenant (SPEC §19), given to its tools
	// as RunContext.Tenant: a call run on a worker carries it on its
	// task. Empty: none.
	Tenant string
	// Agent is the name of the conversation's agent, given to its tools as
	// RunContext.Agent (a call run on a worker carries it on its task).
	// Empty: none.
	Agent string
	// RunID, if set, is the run's ID (default: a new ULID): a service
	// that answered a run's ID before it started (agent serve's API) has
	// its events carry that one.
	RunID string
	// Deps is given to tools as RunContext.Deps.
	Deps any
	// Limits, when non-nil, replace the agent's limits.
	Limits *UsageLimits
	// AllowDeferred lets this run end with DeferredToolRequests.
	AllowDeferred bool
	// Capabilities are added after the agent's.
	Capabilities []Capability
	// OnEvent, if set, receives every event synchronously, in order.
	OnEvent func(Event)
	// Suspend, when closed, asks the run to stop at its next safe point
	// (before the next model request, or while it waits for background
	// tasks) as if it paused: background tasks that can outlive the process
	// are detached and listed in Result.Background, the others are
	// cancelled, and the run returns a paused Result (Suspended set) whose
	// history a later run continues. It is how SIGTERM stops a run.
	Suspend <-chan struct{}
	// Background lists the background tasks an earlier run of the
	// conversation left running (its Result.Background, as the
	// conversation store kept them), each with its outcome when it arrived
	// meanwhile. The run's background capability (package
	// agent/background) adopts them, seeing them as RunInfo.Adopted: the
	// outcomes that arrived reach the model with the first model request,
	// in the order given; a task still running is attached through the
	// executor (an Attacher) and is live like the run's own tasks.
	Background []AdoptedTask
	// Continues is the span context of the run this one continues (a
	// resume after a pause): the run's span links to it (SPEC §14). The
	// zero value links nothing.
	Continues trace.SpanContext
}

// Result is the outcome of a run.
type Result struct {
	// Output is the final text; empty when the run paused.
	Output string
	// Deferred holds the unresolved deferred calls when the run paused.
	Deferred *deferred.Requests
	// Background lists the background tasks that run on after the run
	// paused (kind deferred.KindBackground), and its non-blocking deferred
	// calls still waiting for a decision or an answer (kind approval or
	// external, NonBlocking set; SPEC §12); a later run delivers their
	// outcomes.
	Background []deferred.PendingTask
	// Suspended is set when the run stopped early because
	// RunOptions.Suspend was closed.
	Suspended bool
	// Messages is the whole history after the run.
	Messages message.History
	// Usage is the run's usage.
	Usage message.Usage
	// RunID and ConversationID identify the run.
	RunID, ConversationID string

	newFrom int
	// waiting is set when an IdleHook paused the run (only non-blocking
	// deferred calls were pending; they join Background as the
	// capability's RunWrapper returns).
	waiting bool
}

// NewMessages returns the messages added by this run.
func (r *Result) NewMessages() message.History {
	if r.newFrom > len(r.Messages) {
		return nil
	}
	return r.Messages[r.newFrom:]
}

// Paused reports whether the run paused: it ended with deferred calls,
// with background tasks running on, or because it was suspended.
func (r *Result) Paused() bool {
	return r.Deferred.Len() > 0 || len(r.Background) > 0 || r.Suspended || r.waiting
}

// Run runs the agent on prompt (which may be empty when resuming) and
// returns when the model has answered and nothing is pending, or when the
// run pauses on deferred calls (Result.Deferred), or fails. Errors:
// *UsageLimitExceeded, *UnexpectedModelBehavior, *UserError (matching
// ErrDeferredNotAllowed or ErrPendingCalls), ErrRunCancelled, the context's
// error, or the model's or a tool's error.
func (a *Agent) Run(ctx context.Context, prompt string, opts *RunOptions) (*Result, error) {
	if opts == nil {
		opts = &RunOptions{}
	}
	r := newRun(a, prompt, opts)
	return r.execute(ctx)
}

// Iter runs the agent like Run and yields its events as they happen; the last
// event is always EventFinal, whose Final field describes the outcome. Use
// [FinalResult] after iterating to get the Result and error. Stopping the
// iteration early cancels the run.
func (a *Agent) Iter(ctx context.Context, prompt string, opts *RunOptions) (iter.Seq[Event], func() (*Result, error)) {
	var res *Result
	var err error
	o := RunOptions{}
	if opts != nil {
		o = *opts
	}
	seq := func(yield func(Event) bool) {
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		events := make(chan Event, 64)
		done := make(chan struct{})
		user := o.OnEvent
		o.OnEvent = func(e Event) {
			if user != nil {
				user(e)
			}
			// The loop below drains the channel until it is closed (also
			// after the caller stopped), so this send never blocks for
			// good; the run emits nothing after final, so it never sends on
			// the closed channel.
			events <- e
		}
		go func() {
			defer close(done)
			defer close(events)
			res, err = a.Run(ctx, prompt, &o)
		}()
		stopped := false
		for e := range events {
			if stopped {
				continue
			}
			if !yield(e) {
				stopped = true
				cancel()
			}
		}
		<-done
	}
	return seq, func() (*Result, error) { return res, err }
}
