// Package session runs one process's turn on a durable conversation
// (SPEC §5.5, §6.1): it claims the conversation, loads or creates its
// state, collects the decisions, answers and background outcomes that
// arrived while no agent ran, turns them into the next run's options once
// every pending deferred call has its answer, saves the conversation at
// every step of the run (a [Checkpointer] capability) and at its end, and
// tells the people and workers concerned: approvals announced, decided
// ones resolved, answered external calls cancelled on the workers.
package session

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/offload-dev/offload/pkg/agent"
	"github.com/offload-dev/offload/pkg/conversation"
	"github.com/offload-dev/offload/pkg/deferred"
	"github.com/offload-dev/offload/pkg/message"
	"github.com/offload-dev/offload/pkg/metrics"
	"github.com/offload-dev/offload/pkg/protocol"
	"github.com/offload-dev/offload/pkg/telemetry"
	"github.com/offload-dev/offload/pkg/tool"
)

// Collector reads what arrived for a conversation past its checkpoint
// (convstore.Inbox): everything, or the decisions alone; Watch signals when
// messages of the kinds given are stored, so that a waiting caller reads
// them as they come instead of polling.
type Collector interface {
	Collect(ctx context.Context, st *conversation.State) (int, error)
	CollectDecisions(ctx context.Context, st *conversation.State) (int, error)
	Watch(ctx context.Context, conv string, kinds ...conversation.ArrivalKind) (signal <-chan struct{}, stop func(), err error)
}

// Announcer publishes approval announcements and their resolutions
// (convstore.Announcer).
type Announcer interface {
	Announce(ctx context.Context, rec *deferred.PendingRecord) error
	Resolve(ctx context.Context, conv string, r protocol.Resolution) error
}

// Canceller cancels a task, a call of toolName, that a worker may be
// running (remote.Dispatcher).
type Canceller interface {
	Cancel(ctx context.Context, conv, task, toolName, reason string) error
}

// TaskAttacher attaches to the background tasks a paused run left
// running, waiting for their results from before a resume reads the
// stored ones until the run attaches to them itself (remote.Client), so
// that none stored in between is missed; Release lets go of a task whose
// outcome was read from the stream.
type TaskAttacher interface {
	Attach(conv string, tasks []deferred.PendingTask) error
	Release(taskID string)
}

// AnswerAwaiter is told which external calls of a conversation wait for
// an answer (remote.Client), so that the results it reads live refuse a
// worker's result for one as wrong_kind: only an answer settles an
// external call. Each call replaces the conversation's set.
type AnswerAwaiter interface {
	AwaitAnswers(conv string, tasks []string)
}

// Config configures a [Session].
type Config struct {
	// Store keeps the conversation. Required.
	Store conversation.Store
	// Inbox, if set, reads what arrived while no agent ran.
	Inbox Collector
	// Announcer, if set, announces approvals and resolutions.
	Announcer Announcer
	// Canceller, if set, cancels the workers' copies of external calls
	// that an answer settled.
	Canceller Canceller
	// Attacher, if set, attaches to the pending background tasks while
	// Collect reads what arrived.
	Attacher TaskAttacher
	// Answers, if set, is told the external calls that wait for an
	// answer whenever they change (loaded, collected, saved by a run).
	Answers AnswerAwaiter
	// Holder names this process in the lease. Defaults to "agent".
	Holder string
	// StartedBy is who starts the conversations this configuration
	// creates (State.StartedBy, SPEC §21): agent serve gives the name of
	// the token that started one over its API.
	StartedBy string
	// Tenant, when set, is the tenant (SPEC §19) of the conversations this
	// configuration creates, and the one a conversation it opens must
	// have: one of another tenant, or of none, is a [*TenantError].
	Tenant string
	// MaxPayload bounds the messages given on a command line, as the
	// server bounds the others; 0: no bound.
	MaxPayload int
	// Logger receives the session's logs. Defaults to discarding them.
	Logger *slog.Logger
	// Connected, if set, reports whether the store's server can be
	// reached: when it cannot, the save that ends [Session.Run] waits 2 s
	// rather than 15 s.
	Connected func() bool
	// TracerProvider, if set, records a span for each approval decided
	// while the run waits ([Session.AwaitDecisions]): from its announcement
	// to the decision's arrival, with the decider and the outcome (SPEC
	// §14). Nil records none.
	TracerProvider trace.TracerProvider
	// Approvals, if set, records every decision applied (live or on a
	// resume): offload_approvals_total{tool,outcome} and
	// offload_decision_seconds{tool}, from the call's deferral (its task
	// ID's time, when it was announced) to the decision's stored time.
	Approvals *metrics.Approvals
	// Quorum, if set, returns how many distinct approvers the calls of a
	// tool need (SPEC §12, approval {required: N}): each approval the run
	// leaves pending is saved with it (deferred.PendingTask.Required).
	Quorum func(ctx context.Context, toolName string) int
	// Expiry, if set, returns the approval policy of the calls of a tool
	// when it sets a timeout (SPEC §12): each approval the run leaves
	// pending, or waits for live, is saved with it
	// (deferred.PendingTask.Expiry), and a timeout's decision is admitted
	// only as what it decides, at its time. A call saved without one
	// (before issue 37) gets it when the conversation's arrivals are read.
	Expiry func(ctx context.Context, toolName string) *ApprovalPolicy
}

// DecisionMetaKey is the key, in the metadata of a tool return part, of
// the decision that let the call run or denied it: {"task_id",
// "approved", "by", "at", "channel", "verified", "claimed_channel",
// "override_args", "message"}: by and channel are the service's when
// verified (it signed the decision, or a timeout's was checked against
// the call's policy); an unverified decision's by is its publisher's
// claim and its channel "nats", the channel it claimed in
// claimed_channel.
const DecisionMetaKey = "offload.decision"

// AnswerMetaKey is the key, in the metadata of a tool return part, of
// who answered the external call (SPEC §21): {"task_id", "at",
// "verified", "by", "channel"}. by and channel are there only when
// verified (the service signed the answer: its face authenticated who
// gave it); an answer published raw is recorded verified false, channel
// "nats", and no by, whatever its publisher claimed.
const AnswerMetaKey = "offload.answer"

// Session is one process's claim on a conversation. It is safe for
// concurrent use by the run's hooks.
type Session struct {
	cfg    Config
	log    *slog.Logger
	tracer trace.Tracer
	lease  conversation.Lease

	mu      sync.Mutex
	st      *conversation.State
	rev     conversation.Revision
	stepped bool // the run saved a step
	// handed are the arrivals given to the run (Prepare, Await), applied
	// once the run saves its first step.
	handed []conversation.Arrival
	// decisions record, by tool call ID, the decisions handed to the run
	// for the history's metadata.
	decisions map[string]decisionNote
	// outbox are the resolutions and cancels owed once arrivals are
	// applied.
	resolutions []protocol.Resolution
	cancels     []deferred.PendingTask
	// announced are the approvals this session announced already.
	announced map[string]bool
	// nb is the waiter of non-blocking calls (NonBlocking), made once.
	nb *liveWaiter
	// notified is closed when the last notification made aside
	// (notifyAside) is published.
	notified chan struct{}
	// inline are the approvals --approve wait steps waited for (await),
	// true once decided: their decisions are theirs, never the
	// non-blocking waiter's.
	inline map[string]inlineCall
}

// inlineCall is an approval an --approve wait step waited for.
type inlineCall struct {
	pt      deferred.PendingTask
	decided bool // its decision was handed to the run
}

// decisionNote is a decision to record on the call's tool return: the
// first return of the call after history index from, or, for a
// non-blocking call (whose outcome reaches the model as a follow-up, not
// as a return), its acknowledgement: the return of the call that names
// task.
type decisionNote struct {
	from int
	task string // set for a non-blocking call
	meta map[string]any
	// key is the metadata's key: DecisionMetaKey when empty, or
	// AnswerMetaKey.
	key string
}

// ErrNothingToResume is returned by Prepare for a conversation that has
// nothing pending and whose history does not wait for the model.
var ErrNothingToResume = errors.New("session: nothing is pending and the conversation has ended; give a prompt to continue it")

// ClaimLoader is a store that claims a conversation and loads it in one
// step, reading while it claims where it can (agent serve's wakes, from
// the lease they read before): [Open] uses it for a conversation it does
// not create. A claim whose load fails is released, and the load's
// error returned.
type ClaimLoader interface {
	ClaimLoad(ctx context.Context, id, holder string) (conversation.Lease, *conversation.State, conversation.Revision, error)
}

// Open claims conversation id (waiting for another holder as the store's
// Claim does) and loads it. With create, a conversation the store does not
// have is created empty; without, it is conversation.ErrNotFound.
func Open(ctx context.Context, cfg Config, id string, create bool) (*Session, error) {
	if cfg.Store == nil {
		return nil, errors.New("session: no store")
	}
	if cfg.Holder == "" {
		cfg.Holder = "agent"
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	var (
		lease   conversation.Lease
		st      *conversation.State
		rev     conversation.Revision
		err     error
		claimed bool // and loaded
	)
	if cl, ok := cfg.Store.(ClaimLoader); ok && !create {
		lease, st, rev, err = cl.ClaimLoad(ctx, id, cfg.Holder)
		if err != nil {
			return nil, err
		}
		claimed = true
	} else if lease, err = cfg.Store.Claim(ctx, id, cfg.Holder); err != nil {
		return nil, err
	}
	s := &Session{cfg: cfg, log: log.With(slog.String("conversation_id", id)), tracer: telemetry.Tracer(cfg.TracerProvider),
		lease: lease, decisions: map[string]decisionNote{}, announced: map[string]bool{}}
	if !claimed {
		st, rev, err = cfg.Store.Load(ctx, id)
	}
	switch {
	case errors.Is(err, conversation.ErrNotFound) && create:
		st = &conversation.State{ID: id, History: message.History{}, StartedBy: cfg.StartedBy, Tenant: cfg.Tenant}
		if rev, err = cfg.Store.Save(ctx, st, 0); err != nil {
			s.release()
			return nil, err
		}
	case err != nil:
		s.release()
		return nil, err
	}
	if cfg.Tenant != "" && st.Tenant != cfg.Tenant {
		s.release()
		return nil, &TenantError{ID: id, Tenant: cfg.Tenant}
	}
	s.st, s.rev = st, rev
	s.awaitAnswersLocked()
	return s, nil
}

// awaitAnswersLocked tells cfg.Answers the external calls that wait for
// an answer now.
func (s *Session) awaitAnswersLocked() {
	if s.cfg.Answers == nil {
		return
	}
	var tasks []string
	for _, t := range s.st.Unresolved(deferred.KindExternal) {
		tasks = append(tasks, t.TaskID)
	}
	s.cfg.Answers.AwaitAnswers(s.st.ID, tasks)
}

// ID returns the conversation's ID.
func (s *Session) ID() string { return s.st.ID }

// Lost is closed when the lease was lost: another process may work on
// the conversation, so this one must stop.
func (s *Session) Lost() <-chan struct{} { return s.lease.Lost() }

// Close releases the conversation (and tells cfg.Answers that this
// process no longer waits for its answers), once the resolutions and
// cancels the run's saves owed are published.
func (s *Session) Close() {
	s.awaitNotified()
	if s.cfg.Answers != nil {
		s.cfg.Answers.AwaitAnswers(s.ID(), nil)
	}
	s.release()
}

func (s *Session) release() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.lease.Release(ctx); err != nil {
		s.log.Warn("lease not released; it lapses by itself", slog.Any("error", err))
	}
}

// State returns a copy of the conversation's state.
func (s *Session) State() *conversation.State {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.st.Clone()
}

// SetAgent records the agent the conversation runs with (SPEC §11) and
// saves it.
func (s *Session) SetAgent(ctx context.Context, ref conversation.AgentRef) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.st.Agent = &ref
	return s.saveLocked(ctx)
}

// Collect reads what arrived since the checkpoint (refusing and counting
// what does not resolve a pending task) and saves it.
func (s *Session) Collect(ctx context.Context) (int, error) {
	if s.cfg.Inbox == nil {
		return 0, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	running := s.st.Unresolved(deferred.KindBackground)
	if s.cfg.Attacher != nil && len(running) > 0 {
		// Waited for before the stream is read: a result stored after the
		// read reaches the run that attaches to the task.
		if err := s.cfg.Attacher.Attach(s.st.ID, running); err != nil {
			return 0, err
		}
	}
	if s.st.Pending != nil {
		// A call saved before its timeout was (issue 37) is checked
		// against its tool's timeout as this process has it.
		s.stampExpiry(ctx, s.st.Pending.Tasks)
	}
	n, err := s.cfg.Inbox.Collect(ctx, s.st)
	if err != nil {
		return n, err
	}
	s.awaitAnswersLocked()
	if s.cfg.Attacher != nil {
		for _, t := range running {
			if s.st.Arrived(t.TaskID) {
				s.cfg.Attacher.Release(t.TaskID)
			}
		}
	}
	return n, s.saveLocked(ctx)
}

// Admit checks a message given on a command line exactly as one read from
// the wire (conversation.State.Admit) and records it as an arrival; the
// caller saves with Save. It returns the *conversation.RefusedError of a
// refused one.
func (s *Session) Admit(kind conversation.ArrivalKind, task string, data []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.st.Pending != nil {
		s.stampExpiry(context.Background(), s.st.Pending.Tasks) // as Collect does
	}
	return s.st.Admit(kind, task, data, 0, time.Now(), s.cfg.MaxPayload)
}

// Save stores the state as it is.
func (s *Session) Save(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.saveLocked(ctx)
}

// Unresolved returns what the conversation waits for (see
// [conversation.State.Unresolved]): the pending tasks of kinds (all when
// none is given) whose answer or outcome has not arrived, in the pending
// record's order. With deferred.KindApproval and deferred.KindExternal it
// is what must be answered before [Session.Prepare]; with no kind, what a
// paused run's final event lists.
func (s *Session) Unresolved(kinds ...deferred.Kind) []deferred.PendingTask {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.st.Unresolved(kinds...)
}

// waiting returns the deferred calls of st that wait for an answer.
func waiting(st *conversation.State) []deferred.PendingTask {
	return st.Waiting()
}

// Waiting returns the deferred calls that keep the conversation from being
// continued ([conversation.State.Waiting]): those [Session.Continue]
// waits for.
func (s *Session) Waiting() []deferred.PendingTask {
	s.mu.Lock()
	defer s.mu.Unlock()
	return waiting(s.st)
}

// Prepare returns the options of the run that continues the conversation
// (history, deferred results, adopted background tasks). Every pending
// deferred call must have its answer (see Unresolved). A conversation with
// nothing pending whose history ends with the model's answer has nothing
// to resume without a prompt: ErrNothingToResume.
func (s *Session) Prepare(prompt string) (*agent.RunOptions, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if w := waiting(s.st); len(w) > 0 {
		return nil, fmt.Errorf("session: %d deferred calls wait for an answer", len(w))
	}
	opts := &agent.RunOptions{History: s.st.History, ConversationID: s.st.ID}
	if s.st.Pending == nil {
		if prompt == "" && endsWithAnswer(s.st.History) {
			return nil, ErrNothingToResume
		}
		return opts, nil
	}
	var res *deferred.Results
	byTask := map[string]conversation.Arrival{}
	for _, a := range s.st.Arrivals {
		byTask[a.TaskID] = a
	}
	// A deferred call answered in the history already ran: its process
	// stored its outcome while the step went on, and died (SPEC §20).
	ran := answeredLast(s.st.History)
	for _, t := range s.st.Pending.Tasks {
		if t.Kind == deferred.KindBackground || t.NonBlocking || ran[t.ToolCallID] {
			continue
		}
		if res == nil {
			res = &deferred.Results{Calls: map[string]any{}, Approvals: map[string]any{}, Metadata: map[string]map[string]any{}}
		}
		a := byTask[t.TaskID]
		if err := s.applyLocked(res, t, a, len(s.st.History)); err != nil {
			return nil, err
		}
		s.pausedApprovalSpan(t, a)
	}
	opts.DeferredResults = res
	// Background outcomes that arrived, in arrival order, then the tasks
	// still running (attached by the run).
	for _, a := range s.st.Arrivals {
		t, ok := s.st.PendingTask(a.TaskID)
		if ok && t.NonBlocking && t.Kind != deferred.KindBackground {
			// The outcome of a non-blocking call: delivered like a
			// background outcome (SPEC §12).
			val, err := s.nonBlockingValueLocked(t, a)
			if err != nil {
				return nil, err
			}
			opts.Background = append(opts.Background, agent.AdoptedTask{Task: t, Done: true, Value: val})
			continue
		}
		if !ok || t.Kind != deferred.KindBackground {
			continue
		}
		r, err := protocol.DecodeResult(a.Data, a.TaskID, &protocol.DecodeOpts{MaxSize: -1})
		if err != nil {
			return nil, fmt.Errorf("session: stored result of task %s: %w", a.TaskID, err)
		}
		val, oerr := r.Outcome()
		opts.Background = append(opts.Background, agent.AdoptedTask{Task: t, Done: true, Value: val, Err: oerr})
	}
	for _, t := range s.st.Unresolved() {
		if t.Kind == deferred.KindBackground || t.NonBlocking {
			opts.Background = append(opts.Background, agent.AdoptedTask{Task: t})
		}
	}
	s.handed = append(s.handed, s.st.Arrivals...)
	return opts, nil
}

// answeredLast returns the IDs of the calls of the history's last
// response that a request after it answers.
func answeredLast(h message.History) map[string]bool {
	var out map[string]bool
	for i := len(h) - 1; i >= 0 && h[i].Role == message.RoleRequest; i-- {
		for _, p := range h[i].Parts {
			id := ""
			switch x := p.(type) {
			case message.ToolReturn:
				id = x.ToolCallID
			case message.RetryPrompt:
				id = x.ToolCallID
			}
			if id != "" {
				if out == nil {
					out = map[string]bool{}
				}
				out[id] = true
			}
		}
	}
	return out
}

// answerNote is the note of answer r of external call t, arrived as a
// (AnswerMetaKey): who gave it and how only when the service signed it.
func answerNote(t deferred.PendingTask, a conversation.Arrival, r protocol.Result) map[string]any {
	note := map[string]any{"task_id": t.TaskID, "verified": a.Verified, "channel": protocol.ChannelNATS}
	if !a.At.IsZero() {
		note["at"] = a.At.UTC().Format(time.RFC3339Nano) // when it was stored
	}
	if a.Verified {
		note["channel"] = cmp.Or(r.Channel, protocol.ChannelNATS)
		if r.By != "" {
			note["by"] = r.By
		}
	}
	return note
}

// endsWithAnswer reports whether the history's last message is a response
// without tool calls (the model has answered; nothing waits).
func endsWithAnswer(h message.History) bool {
	return len(h) > 0 && h[len(h)-1].Role == message.RoleResponse && len(h[len(h)-1].ToolCalls()) == 0
}

// applyLocked adds the answer a of deferred call t to res, and notes what
// the history and the people watching are owed for it.
func (s *Session) applyLocked(res *deferred.Results, t deferred.PendingTask, a conversation.Arrival, from int) error {
	id := t.ToolCallID
	switch a.Kind {
	case conversation.ArrivalDecision:
		d, err := protocol.DecodeDecision(a.Data, &protocol.DecodeOpts{MaxSize: -1})
		if err != nil {
			return fmt.Errorf("session: stored decision of task %s: %w", t.TaskID, err)
		}
		note := map[string]any{"task_id": t.TaskID, "approved": d.Approved}
		if d.By != "" {
			note["by"] = d.By
		}
		if !a.At.IsZero() {
			note["at"] = a.At.UTC().Format(time.RFC3339Nano) // when it was stored
		}
		// The by and channel of a decision the service signed are its
		// face's; any other's are only what its publisher claims: it is
		// recorded as given over raw NATS, its claim kept aside (SPEC §12).
		note["verified"] = a.Verified
		note["channel"] = protocol.ChannelNATS
		if a.Verified {
			note["channel"] = cmp.Or(d.Channel, protocol.ChannelNATS)
		} else if d.Channel != "" && d.Channel != protocol.ChannelNATS {
			note["claimed_channel"] = d.Channel
		}
		resolved := protocol.ResolvedDenied
		switch {
		case d.Approved && d.OverrideArgs != nil:
			res.Approvals[id] = deferred.ToolApproved{OverrideArgs: d.OverrideArgs}
			note["override_args"] = d.OverrideArgs
			resolved = protocol.ResolvedApproved
		case d.Approved:
			res.Approvals[id] = true
			resolved = protocol.ResolvedApproved
		case d.By == timeoutDecider && d.OnTimeout == protocol.OnTimeoutFail:
			// An approval's timeout that ends the run (SPEC §12): the
			// model is not told; the run fails naming the call.
			res.Approvals[id] = &deferred.ApprovalTimeoutError{Tool: t.Tool, TaskID: t.TaskID}
		case d.By == timeoutDecider:
			// An approval's timeout (SPEC §12): never shown as a person's
			// denial.
			res.Approvals[id] = deferred.ToolDenied{Message: ExpiredText(t.Tool, t.TaskID, d.Message)}
			if d.Message != "" {
				note["message"] = d.Message
			}
		default:
			res.Approvals[id] = deferred.ToolDenied{Message: d.Message}
			if d.Message != "" {
				note["message"] = d.Message
			}
		}
		if d.Metadata != nil {
			res.Metadata[id] = d.Metadata
		}
		dn := decisionNote{from: from, meta: note}
		if t.NonBlocking {
			dn = decisionNote{task: t.TaskID, meta: note}
		}
		s.decisions[id] = dn
		s.resolutions = append(s.resolutions, protocol.Resolution{TaskID: t.TaskID, Resolved: resolved, By: d.By})
		s.countDecision(t, a, d)
	case conversation.ArrivalAnswer, conversation.ArrivalResult:
		r, err := protocol.DecodeResult(a.Data, t.TaskID, &protocol.DecodeOpts{MaxSize: -1})
		if err != nil {
			return fmt.Errorf("session: stored answer of task %s: %w", t.TaskID, err)
		}
		res.Calls[id] = callValue(r)
		if a.Kind == conversation.ArrivalAnswer {
			dn := decisionNote{from: from, meta: answerNote(t, a, r), key: AnswerMetaKey}
			if t.NonBlocking {
				dn.from, dn.task = 0, t.TaskID
			}
			s.decisions[id] = dn
		}
		// An answer that goes to the call's next attempt (an MCP
		// elicitation's) leaves the worker that holds the call running.
		if a.Kind == conversation.ArrivalAnswer && !tool.AnswersNextAttempt(t.Metadata) {
			s.cancels = append(s.cancels, t)
		}
	default:
		return fmt.Errorf("session: task %s has no answer", t.TaskID)
	}
	return nil
}

// callValue is the deferred result of an external call answered by r: its
// value, a ModelRetry or a ToolFailed; a worker's error shows the model
// only its type, as an unexpected failure does.
func callValue(r protocol.Result) any {
	val, err := r.Outcome()
	if err == nil {
		return val
	}
	var re *protocol.RemoteError
	switch {
	case errors.As(err, &re):
		return toolFailed(re.ErrorType())
	case errors.Is(err, tool.ErrCancelled):
		return toolFailed("Cancelled")
	}
	return err // *tool.ModelRetry or *tool.ToolFailed
}

func toolFailed(msg string) error { return &tool.ToolFailed{Message: msg} }

// TenantError is the error of [Open] for a conversation that is not of
// the tenant its configuration asks for (Config.Tenant): a caller bound
// to a tenant may not run another tenant's conversations, nor give a
// stored conversation a tenant it was not created with. It names only
// the tenant asked for, not the one the conversation has.
type TenantError struct {
	// ID is the conversation; Tenant the tenant asked for.
	ID, Tenant string
}

func (e *TenantError) Error() string {
	return fmt.Sprintf("session: conversation %s is not of tenant %s", e.ID, e.Tenant)
}

// tenantAndAgent returns the conversation's tenant (State.Tenant) and
// its agent's name (State.Agent, "" without one).
func (s *Session) tenantAndAgent() (tenant, agent string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.st.Agent != nil {
		agent = s.st.Agent.Name
	}
	return s.st.Tenant, agent
}

// SetFrontendTools records the tools a frontend offers the
// conversation's model (SPEC §18), replacing those recorded before, and
// saves them: every later run of the conversation, on any process,
// offers them ([Session.FrontendTools]).
func (s *Session) SetFrontendTools(ctx context.Context, tools []conversation.FrontendTool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.st.FrontendTools = slices.Clone(tools)
	return s.saveLocked(ctx)
}
