package background

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/offload-dev/offload/pkg/agent"
	"github.com/offload-dev/offload/pkg/message"
	"github.com/offload-dev/offload/pkg/tool"
)

// Texts of SPEC §4 that the model sees.
const (
	// Instructions is added to the system prompt of every run with
	// [Tools].
	Instructions = "Some tools return right away and deliver their result later as a follow-up message. Pass run_in_background=true to a tool that accepts it when you want to keep working and get its result later."
	// RunInBackgroundParam is the flag added to the schema of optional
	// background tools.
	RunInBackgroundParam = "run_in_background"
	// runInBackgroundSchema is the flag's schema, as the model sees it.
	runInBackgroundSchema = `{"type":"boolean","description":"Set to true to keep working and get the result later as a follow-up message."}`
	// runInBackgroundRetry is the retry prompt for a non-boolean flag.
	runInBackgroundRetry = "`run_in_background` must be true or false."
)

// Config configures [Tools].
type Config struct {
	// Tools chooses the tools that always run in the background. The zero
	// value is [DefaultSelector] (metadata background: true). Tools whose
	// metadata has background: "optional" run in the background when the
	// model passes run_in_background=true.
	Tools Selector
	// Executor starts the background calls. Nil means [InProcessExecutor].
	Executor Executor
	// Logger receives the messages of unexpected failures (the model sees
	// only their type). Nil means the agent's logger.
	Logger *slog.Logger
	// NonBlocking, when set, makes the approval-gated and external calls
	// it chooses non-blocking (SPEC §12): see [NonBlockingConfig].
	NonBlocking *NonBlockingConfig
}

// capability is the capability of [Tools].
type capability struct {
	sel  Selector
	exec Executor
	log  *slog.Logger
	nb   *NonBlockingConfig
	// quiet adds no instructions: NonBlockingCalls, which runs no tool in
	// the background by itself.
	quiet bool
}

// Tools returns a capability that runs the chosen tool calls in
// the background (SPEC §4): such a call returns at once with an
// acknowledgement naming its task, the run goes on, and the call's outcome
// reaches the model later as a follow-up user message, between model
// requests. When the model ends its turn while tasks are live, the run
// waits for the next outcome and gives the model another turn; Run returns
// only when no task is live. Sequential tools never run in the background.
//
// Several such capabilities combine: a call runs once, with the
// executor of the first capability that chooses its tool.
//
// Ending a run (an error, a usage limit, RunContext.Cancel, the context's
// cancellation) cancels every live task and refuses late outcomes. A pause
// (deferred calls, RunOptions.Suspend) is never held back by live tasks:
// those whose executor can detach them run on and are listed in
// agent.Result.Background; the others are cancelled. The calls tools hand
// off when the run suspends ([agent.Handoff]) become such tasks too, when
// the executor is an [Attacher].
func Tools(cfg Config) agent.Capability {
	if cfg.Executor == nil {
		cfg.Executor = InProcessExecutor{}
	}
	var nb *NonBlockingConfig
	if cfg.NonBlocking != nil && cfg.NonBlocking.Waiter != nil {
		c := *cfg.NonBlocking
		if c.Tools.match == nil {
			c.Tools = NonBlockingSelector
		}
		nb = &c
	}
	return &capability{sel: cfg.Tools, exec: cfg.Executor, log: cfg.Logger, nb: nb}
}

// The hooks of the capability: one whose signature drifted from the
// loop's interface would be skipped silently.
var (
	_ agent.InstructionsProvider = (*capability)(nil)
	_ agent.RunWrapper           = (*capability)(nil)
	_ agent.ToolsPreparer        = (*capability)(nil)
	_ agent.ToolCallPreparer     = (*capability)(nil)
	_ agent.ToolCallWrapper      = (*capability)(nil)
	_ agent.ModelRequestHook     = (*capability)(nil)
	_ agent.IdleHook             = (*capability)(nil)
	_ agent.DeferredHolder       = (*capability)(nil)
	_ agent.HandoffKeeper        = (*capability)(nil)
)

// bgMode is how a tool runs under [Tools].
type bgMode int

const (
	bgNone     bgMode = iota // inline
	bgAlways                 // always in the background
	bgOptional               // in the background when the model asks
)

// Instructions implements [agent.InstructionsProvider].
func (b *capability) Instructions() string {
	if b.quiet {
		return ""
	}
	return Instructions
}

// WrapRun implements [agent.RunWrapper]: the first such capability of a
// run owns its background tasks; the others register with it.
func (b *capability) WrapRun(ctx context.Context, info *agent.RunInfo, next func(context.Context) (*agent.Result, error)) (*agent.Result, error) {
	if br := bgRunOf(ctx); br != nil {
		br.caps = append(br.caps, b)
		if b.nb != nil && len(br.unwaited) > 0 {
			if err := br.adoptWaits(ctx, b.nb.Waiter); err != nil {
				return nil, err
			}
		}
		return next(ctx)
	}
	br := newBgRun(b, info, b.log)
	err := br.adopt(ctx, info.Adopted())
	if err == nil && b.nb != nil && len(br.unwaited) > 0 {
		err = br.adoptWaits(ctx, b.nb.Waiter)
	}
	if err != nil {
		res, _ := br.end(nil, err)
		return res, err
	}
	res, err := next(context.WithValue(ctx, bgRunKey{}, br))
	return br.end(res, err)
}

// owner returns the run's background state when b owns it.
func (b *capability) owner(ctx context.Context) *bgRun {
	br := bgRunOf(ctx)
	if br == nil || br.owner != b {
		return nil
	}
	return br
}

// PrepareTools implements [agent.ToolsPreparer]: optional background tools get
// the run_in_background flag in their schema.
func (b *capability) PrepareTools(ctx context.Context, info *agent.RunInfo, tools []*tool.Tool) ([]*tool.Tool, error) {
	br := b.owner(ctx)
	if br == nil {
		return tools, nil
	}
	if !slices.ContainsFunc(tools, func(t *tool.Tool) bool { return br.mode(ctx, t) == bgOptional }) {
		return tools, nil // nothing to change
	}
	out := make([]*tool.Tool, 0, len(tools))
	for _, t := range tools {
		if br.mode(ctx, t) != bgOptional {
			out = append(out, t)
			continue
		}
		if t.HasParameter(RunInBackgroundParam) {
			return nil, &agent.UserError{Message: fmt.Sprintf("Tool '%s' already has a 'run_in_background' parameter, so it cannot be an optional background tool.", t.Name)}
		}
		params, err := withFlag(t.Parameters)
		if err != nil {
			return nil, fmt.Errorf("agent: background tool %s: %w", t.Name, err)
		}
		// The clone keeps the compiled schema of the tool: the flag is
		// taken out of the arguments before they are validated.
		c := t.Clone()
		c.Parameters = params
		out = append(out, c)
	}
	return out, nil
}

// withFlag adds the run_in_background property to an object schema.
func withFlag(params json.RawMessage) (json.RawMessage, error) {
	var schema map[string]json.RawMessage
	if len(bytes.TrimSpace(params)) == 0 {
		params = json.RawMessage(`{"type":"object","properties":{}}`)
	}
	if err := json.Unmarshal(params, &schema); err != nil {
		return nil, err
	}
	props := map[string]json.RawMessage{}
	if raw, ok := schema["properties"]; ok {
		if err := json.Unmarshal(raw, &props); err != nil {
			return nil, err
		}
	}
	props[RunInBackgroundParam] = json.RawMessage(runInBackgroundSchema)
	raw, err := json.Marshal(props)
	if err != nil {
		return nil, err
	}
	schema["properties"] = raw
	return json.Marshal(schema)
}

// PrepareToolCall implements [agent.ToolCallPreparer]: it takes the
// run_in_background flag out of an optional tool's arguments (a
// non-boolean value is a retry) and names the task of a call that will run
// in the background.
func (b *capability) PrepareToolCall(ctx context.Context, _ *agent.RunInfo, pc *agent.PreparedCall) error {
	br := b.owner(ctx)
	if br == nil || pc.Tool == nil {
		return nil
	}
	background := false
	switch br.mode(ctx, pc.Tool) {
	case bgNone:
		return nil
	case bgAlways:
		background = true
	case bgOptional:
		args, flag, err := takeFlag(pc.Args)
		if err != nil {
			return err
		}
		pc.Args, background = args, flag
	}
	if background && !pc.Deferred && pc.Tool.Kind != tool.KindExternal {
		pc.TaskID = pc.DeferredTaskID
		if pc.TaskID == "" {
			pc.TaskID = ulid.Make().String()
		}
	}
	return nil
}

// takeFlag removes run_in_background from raw arguments. Arguments that
// are not a JSON object are left as they are (validation refuses them).
func takeFlag(raw string) (string, bool, error) {
	dec := json.NewDecoder(bytes.NewReader([]byte(raw)))
	dec.UseNumber()
	var obj map[string]any
	if err := dec.Decode(&obj); err != nil || obj == nil {
		return raw, false, nil //nolint:nilerr // not a JSON object: left as it is, validation refuses it
	}
	v, ok := obj[RunInBackgroundParam]
	if !ok {
		return raw, false, nil
	}
	flag, isBool := v.(bool)
	if !isBool {
		return raw, false, tool.Retry(runInBackgroundRetry)
	}
	delete(obj, RunInBackgroundParam)
	out, err := json.Marshal(obj)
	if err != nil {
		return raw, false, nil //nolint:nilerr // what was decoded encodes; were it not, the arguments stay as they came
	}
	return string(out), flag, nil
}

// WrapToolCall implements [agent.ToolCallWrapper]: a call named as a task by
// PrepareToolCall starts in the background and returns the
// acknowledgement.
func (b *capability) WrapToolCall(ctx context.Context, call *agent.ToolCall, next agent.ToolCallFunc) (any, error) {
	br := b.owner(ctx)
	if br == nil || call.TaskID == "" || inBackground(ctx) {
		return next(ctx, call)
	}
	exec := br.executor(ctx, call.Tool)
	return br.spawn(ctx, exec, call, next)
}

// BeforeModelRequest implements [agent.ModelRequestHook]: the outcomes that
// arrived are added to the request as follow-up messages.
func (b *capability) BeforeModelRequest(ctx context.Context, _ *agent.RunInfo, req *message.Message) error {
	br := b.owner(ctx)
	if br == nil {
		return nil
	}
	if len(br.unwaited) > 0 {
		t := br.unwaited[0].Task
		return fmt.Errorf("agent: task %s of tool %s waits for a decision, but the run has no waiter for non-blocking calls", t.TaskID, t.Tool)
	}
	parts, err := br.deliver(ctx)
	req.Parts = append(req.Parts, parts...)
	return err
}

// WhenIdle implements [agent.IdleHook]: when the model ended its turn, or a
// resumed run has nothing new for the model yet, it waits for the next
// outcome while tasks are live (see awaitOutcome).
func (b *capability) WhenIdle(ctx context.Context, _ *agent.RunInfo) (agent.Idle, error) {
	br := b.owner(ctx)
	if br == nil {
		return agent.Idle{}, nil
	}
	return br.awaitOutcome(ctx)
}

// HoldDeferred implements [agent.DeferredHolder]: the calls a non-blocking
// selector chooses become live tasks waiting for their outcome
// (nonblocking.go).
func (b *capability) HoldDeferred(ctx context.Context, _ *agent.RunInfo, calls []*agent.DeferredCall) error {
	br := b.owner(ctx)
	if br == nil {
		return nil
	}
	return br.holdDeferred(ctx, calls)
}

// Suspending implements [agent.HandoffKeeper]: the run's Suspend channel,
// for a call that does not run in the background, when the executor can
// attach to a task again.
func (b *capability) Suspending(ctx context.Context, info *agent.RunInfo) <-chan struct{} {
	br := b.owner(ctx)
	if br == nil || inBackground(ctx) {
		return nil
	}
	if _, ok := b.exec.(Attacher); !ok {
		return nil
	}
	return info.Suspend()
}

// KeepHandoff implements [agent.HandoffKeeper]: the call handed off becomes
// a live task of the run, and its result the acknowledgement of a
// background call.
func (b *capability) KeepHandoff(ctx context.Context, _ *agent.RunInfo, call *agent.ToolCall, h *agent.Handoff) (any, error) {
	br := b.owner(ctx)
	if br == nil {
		return nil, errors.New("agent: the capability does not own the run's background tasks")
	}
	started := h.StartedAt
	if started.IsZero() {
		started = time.Now()
	}
	return br.track(&bgTask{id: h.TaskID, attempt: h.Attempt, deadline: h.Deadline, call: call, task: h.Task, started: started.UTC()})
}
