// Package pending answers, in one place, the questions people and the
// faces that serve them ask of the work that waits for a person: which
// calls wait, across conversations or in one ([Desk.Calls]); one call as
// it waits now ([Desk.Call]); and deciding or answering one
// ([Desk.Decide], [Desk.Answer]): the arguments of an edit checked
// against the tool's schema, the decision bound to the arguments shown
// (its args_digest), signed for a quorum and published first-wins, each
// publish a producer span. `agent pending|approve|deny|answer`, the HTTP
// API, the web inbox, its signed links and the core's approval timers
// all ask here.
//
// It reads only the people's pending records (the bucket <prefix>_pending
// through [Records], natsjs/convstore.Pending), never a conversation's
// state or history, so that the approver and answerer roles can use it.
// It imports no NATS code.
package pending

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/offload-dev/offload/pkg/conversation"
	"github.com/offload-dev/offload/pkg/deferred"
	"github.com/offload-dev/offload/pkg/protocol"
	"github.com/offload-dev/offload/pkg/telemetry"
	"github.com/offload-dev/offload/pkg/tool"
)

// Records are the people's pending records (natsjs/convstore.Pending):
// one per conversation that waits for something, written with every save
// of it.
type Records interface {
	// List returns the conversations with a pending record, sorted.
	List(ctx context.Context) ([]string, error)
	// Get returns conversation id's record (an error wrapping
	// conversation.ErrNotFound when it has none).
	Get(ctx context.Context, id string) (*conversation.Summary, error)
	// Waiting returns the tasks of s nothing is stored for yet, in the
	// record's order.
	Waiting(ctx context.Context, s *conversation.Summary) ([]deferred.PendingTask, error)
	// Digest returns the args_digest of task as pending in conv (s its
	// record, nil when none); an error wrapping conversation.ErrNotFound
	// when it is not pending.
	Digest(ctx context.Context, conv string, s *conversation.Summary, task string) (string, error)
	// Publish checks data, a decision or an answer of task, against s as
	// the run that reads it will, and publishes it first-wins; it
	// returns the subject (a *conversation.RefusedError when refused).
	Publish(ctx context.Context, conv string, s *conversation.Summary, kind conversation.ArrivalKind, task string, data []byte) (string, error)
	// Changes returns a channel that receives a signal whenever what
	// waits may have changed, closed once ctx ends.
	Changes(ctx context.Context) (<-chan struct{}, error)
	// Index is the index of pending calls the paged views read
	// ([Desk.Page]).
	Index
}

// Live are the approvals that live runs wait for and no record holds yet
// (a run with --approve wait; natsjs/convstore.Announcer): best effort.
type Live interface {
	// Conversations returns the conversations with approvals announced.
	Conversations(ctx context.Context) []string
	// Waiting returns the approvals conv's live run waits for, skipping
	// the tasks of skip.
	Waiting(ctx context.Context, conv string, skip map[string]bool) []deferred.PendingTask
}

// Timeout is an approval's expiry (SPEC §12): After its deferral, the
// call is decided OnTimeout ("approve" or "deny") unless a person
// decided first.
type Timeout struct {
	After     time.Duration
	OnTimeout string
}

// Config configures a [Desk].
type Config struct {
	// Records are the pending records. Required.
	Records Records
	// Live, if set, adds the approvals live runs announced and no record
	// holds to [Desk.Calls] (agent pending).
	Live Live
	// Tools, if set, returns the tool an agent's call was made to: the
	// arguments of an edited approval are checked against its schema
	// before anything is published, and one whose tool cannot be found is
	// refused (an *ArgsError). Without it edits are published unchecked
	// (the run checks them when it applies the decision).
	Tools func(ctx context.Context, agent, tool string) (*tool.Tool, error)
	// Timeouts, if set, returns the expiry of the approvals of an agent's
	// tool, shown with each call ([Call.Expires]).
	Timeouts func(ctx context.Context, agent, tool string) (Timeout, bool)
	// Queue, if set, lists the calls held in their tools' queues by a
	// limit ([Desk.Queued], SPEC §19).
	Queue Queue
	// TracerProvider, if set, records a producer span for each decision
	// and answer published (SPEC §14: send decision, send answer).
	TracerProvider trace.TracerProvider
	// Logger receives what is refused. Defaults to discarding it.
	Logger *slog.Logger
}

// Desk is the one place pending work is asked about and decided.
type Desk struct {
	cfg Config
}

// New returns the desk of cfg.
func New(cfg Config) (*Desk, error) {
	if cfg.Records == nil {
		return nil, errors.New("pending: no records")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Desk{cfg: cfg}, nil
}

// Call is a call that waits for a person (or for a background outcome),
// with its conversation.
type Call struct {
	// ConversationID is the call's conversation; Agent its agent, Prompt
	// its last prompt (as its pending record holds them).
	ConversationID string `json:"conversation_id"`
	Agent          string `json:"agent,omitempty"`
	Prompt         string `json:"prompt,omitempty"`
	// StartedBy is who started its conversation (SPEC §21), when known.
	StartedBy string `json:"started_by,omitempty"`
	// Of is, for a call a person decides, how many calls of its
	// conversation's pause a person decides (SPEC §21: "decision 1 of
	// 2"), those decided already but not yet applied included.
	Of int `json:"of,omitempty"`
	// Waiting is, for a call a person decides, how many calls of its
	// conversation a person decides wait now, this one included (a page
	// may show some of them only).
	Waiting int `json:"-"`
	// Description is its tool's description (Config.Tools), what
	// approving it does (SPEC §21); empty when the tool is not found.
	Description string `json:"description,omitempty"`
	deferred.PendingTask
	// Approvals are the approvals counted so far of a call that needs a
	// quorum (Required), as its conversation last saved them.
	Approvals []conversation.Vote `json:"approvals,omitempty"`
	// Expires is when an approval's timeout decides it (zero: never, or
	// unknown here), and OnTimeout what it decides.
	Expires   time.Time `json:"-"`
	OnTimeout string    `json:"-"`
}

// Requested is when the call was deferred: its task ID's time (zero for
// a task ID that is not a ULID).
func (c Call) Requested() time.Time {
	id, err := protocol.ParseID(c.TaskID)
	if err != nil {
		return time.Time{}
	}
	return id.Timestamp().UTC()
}

// Filter selects calls; its zero value selects every call.
type Filter struct {
	// Conversation, if set, is the one conversation read.
	Conversation string
	// Agent, Tool: only the calls of that agent, of that tool.
	Agent, Tool string
	// Kinds: only calls of these kinds.
	Kinds []deferred.Kind
}

func (f Filter) keeps(c Call) bool {
	return (f.Agent == "" || c.Agent == f.Agent) && (f.Tool == "" || c.Tool == f.Tool) &&
		(len(f.Kinds) == 0 || slices.Contains(f.Kinds, c.Kind))
}

// ForPeople selects the calls a person answers: approvals and external
// calls.
var ForPeople = []deferred.Kind{deferred.KindApproval, deferred.KindExternal}

// Records calls fn with each conversation's pending record, in the order
// of the conversations' IDs (a record deleted meanwhile is skipped),
// until fn returns an error, which Records returns.
func (d *Desk) Records(ctx context.Context, fn func(*conversation.Summary) error) error {
	ids, err := d.cfg.Records.List(ctx)
	if err != nil {
		return err
	}
	for _, id := range ids {
		s, err := d.cfg.Records.Get(ctx, id)
		if errors.Is(err, conversation.ErrNotFound) {
			continue // resolved since the listing
		}
		if err != nil {
			return err
		}
		if err := fn(s); err != nil {
			return err
		}
	}
	return nil
}

// Calls returns the calls f selects that wait: those of the pending
// records nothing is stored for yet (and, with Config.Live, the
// approvals live runs announced), by conversation in the order of their
// IDs, each conversation's in its record's order.
func (d *Desk) Calls(ctx context.Context, f Filter) ([]Call, error) {
	var out []Call
	add := func(s *conversation.Summary) error {
		calls, err := d.waiting(ctx, s, d.cfg.Live != nil)
		if err != nil {
			return err
		}
		for _, c := range calls {
			if f.keeps(c) {
				out = append(out, c)
			}
		}
		return nil
	}
	if f.Conversation != "" {
		s, err := d.recordOf(ctx, f.Conversation)
		if err != nil {
			return nil, err
		}
		return out, add(s)
	}
	if d.cfg.Live == nil {
		return out, d.Records(ctx, add)
	}
	ids, err := d.cfg.Records.List(ctx)
	if err != nil {
		return nil, err
	}
	for _, id := range d.cfg.Live.Conversations(ctx) {
		if !slices.Contains(ids, id) {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	for _, id := range ids {
		s, err := d.recordOf(ctx, id)
		if err != nil {
			return nil, err
		}
		if err := add(s); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// waiting returns the calls of record s that wait (and, with live, the
// live approvals of its conversation no record holds: Config.Live).
func (d *Desk) waiting(ctx context.Context, s *conversation.Summary, live bool) ([]Call, error) {
	var tasks []deferred.PendingTask
	if len(s.Tasks) > 0 {
		var err error
		if tasks, err = d.cfg.Records.Waiting(ctx, s); err != nil {
			return nil, err
		}
	}
	if live {
		recorded := make(map[string]bool, len(s.Tasks))
		for _, t := range s.Tasks {
			recorded[t.TaskID] = true
		}
		tasks = append(tasks, d.cfg.Live.Waiting(ctx, s.ConversationID, recorded)...)
	}
	out := make([]Call, 0, len(tasks))
	for _, t := range tasks {
		out = append(out, d.call(ctx, s, t))
	}
	// Of: the calls of the pause a person decides, those decided since
	// its save included (its record's), or those waiting when more.
	of, waitingOf := 0, 0
	for _, t := range s.Tasks {
		if slices.Contains(ForPeople, t.Kind) {
			of++
		}
	}
	for _, c := range out {
		if slices.Contains(ForPeople, c.Kind) {
			waitingOf++
		}
	}
	for i := range out {
		if slices.Contains(ForPeople, out[i].Kind) {
			out[i].Of, out[i].Waiting = max(of, waitingOf), waitingOf
		}
	}
	return out, nil
}

// call is task t of record s as a Call.
func (d *Desk) call(ctx context.Context, s *conversation.Summary, t deferred.PendingTask) Call {
	c := Call{ConversationID: s.ConversationID, Agent: s.Agent, Prompt: s.Prompt, StartedBy: s.StartedBy, PendingTask: t}
	if d.cfg.Tools != nil && (t.Kind == deferred.KindApproval || t.Kind == deferred.KindExternal) {
		if tl, err := d.cfg.Tools(ctx, s.Agent, t.Tool); err == nil && tl != nil {
			c.Description = tl.Description
		}
	}
	if t.Required > 1 {
		c.Approvals = s.State().VotesFor(t.TaskID)
	}
	if t.Kind == deferred.KindApproval && d.cfg.Timeouts != nil {
		if to, ok := d.cfg.Timeouts(ctx, s.Agent, t.Tool); ok {
			if at := c.Requested(); !at.IsZero() {
				// The timeout counts from the announcement, at the
				// deferral (the task ID's time) give or take its save.
				c.Expires, c.OnTimeout = at.Add(to.After), to.OnTimeout
			}
		}
	}
	return c
}

// ErrNotPending is returned by [Desk.Call] for a call that is not (or no
// longer) pending in its conversation's record.
var ErrNotPending = errors.New("this call is no longer pending")

// Call returns task of conversation conv as its record holds it now
// (ErrNotPending when it holds none such). Whether a decision or an
// answer was stored for it since the record's save is not read: the
// publish of one refuses it.
func (d *Desk) Call(ctx context.Context, conv, task string) (*Call, error) {
	s, err := d.record(ctx, conv)
	if err != nil {
		return nil, err
	}
	if t, ok := pendingTask(s, task); ok {
		c := d.call(ctx, s, t)
		return &c, nil
	}
	return nil, fmt.Errorf("%w: task %s of conversation %s", ErrNotPending, task, conv)
}

// pendingTask returns task as record s holds it (s nil: none).
func pendingTask(s *conversation.Summary, task string) (deferred.PendingTask, bool) {
	if s == nil {
		return deferred.PendingTask{}, false
	}
	for _, t := range s.Tasks {
		if t.TaskID == task {
			return t, true
		}
	}
	return deferred.PendingTask{}, false
}

// record returns conv's pending record, nil when it has none.
func (d *Desk) record(ctx context.Context, conv string) (*conversation.Summary, error) {
	s, err := d.cfg.Records.Get(ctx, conv)
	if errors.Is(err, conversation.ErrNotFound) {
		return nil, nil
	}
	return s, err
}

// ArgsError is the refusal of an approval's edited arguments: they fail
// the tool's schema (Message says how, in a person's words), or the
// schema is not known here.
type ArgsError struct {
	// Task is the call's task ID.
	Task string
	// Message says what is wrong.
	Message string
}

func (e *ArgsError) Error() string { return e.Message }

// Decide publishes decision d of task in conversation conv, as pending
// now: an approval's edited arguments (d.OverrideArgs) checked against
// the tool's schema first (an *ArgsError, nothing published; see
// Config.Tools) and published compact; bound to the arguments as
// pending (d.ArgsDigest set when d carries none: a decision for
// arguments that changed since is refused as stale); signed when the
// call needs a quorum; first wins. The record is read once. It returns
// the subject, or the refusal (a *conversation.RefusedError: unknown
// task, duplicate, stale, wrong kind, unauthenticated …).
func (d *Desk) Decide(ctx context.Context, conv, task string, dec protocol.Decision) (string, error) {
	s, err := d.record(ctx, conv)
	if err != nil {
		return "", err
	}
	if dec.Approved && len(dec.OverrideArgs) > 0 {
		// A call that is not pending is left to the publish, which
		// says unknown task or duplicate.
		if t, ok := pendingTask(s, task); ok && d.cfg.Tools != nil {
			args, err := d.checkArgs(ctx, s.Agent, t, string(dec.OverrideArgs))
			if err != nil {
				return "", err
			}
			dec.OverrideArgs = args
		} else if !json.Valid(dec.OverrideArgs) {
			return "", &ArgsError{Task: task, Message: "the arguments are not JSON"}
		}
	}
	if dec.ArgsDigest == "" {
		digest, err := d.cfg.Records.Digest(ctx, conv, s, task)
		switch {
		case err == nil:
			dec.ArgsDigest = digest
		case !errors.Is(err, conversation.ErrNotFound): // not pending: the publish says so
			return "", err
		}
	}
	data, err := json.Marshal(dec)
	if err != nil {
		return "", fmt.Errorf("pending: decision: %w", err)
	}
	return d.publish(ctx, conv, s, conversation.ArrivalDecision, task, data, dec.Channel)
}

// Answer publishes data, the answer of external call task in
// conversation conv (an Answer of SPEC §5.2), checked against its
// record as the run will, first wins; it returns the subject or the
// refusal. It names no one: see [Desk.AnswerAs].
func (d *Desk) Answer(ctx context.Context, conv, task string, data []byte) (string, error) {
	return d.AnswerAs(ctx, conv, task, data, "", "")
}

// AnswerAs is [Desk.Answer] of an answer given by by (the person the
// face authenticated; "" for none) over channel (one of the
// protocol.ChannelXxx): they are set in the answer, replacing any its
// sender claimed, and the answer is signed with the service's key, if
// any, so that the run records who answered (SPEC §21). A malformed
// answer is published as given, for the refusal to say why.
func (d *Desk) AnswerAs(ctx context.Context, conv, task string, data []byte, by, channel string) (string, error) {
	s, err := d.record(ctx, conv)
	if err != nil {
		return "", err
	}
	data = attribute(data, by, channel)
	subject, err := d.publish(ctx, conv, s, conversation.ArrivalAnswer, task, data, channel)
	var re *conversation.RefusedError
	if errors.As(err, &re) && re.Reason == conversation.ReasonMalformed {
		re.Err = fmt.Errorf("%w; %s", re.Err, AnswerForm(data))
	}
	return subject, err
}

// attribute returns answer data with by and channel set (none claimed
// when empty), data itself when it is not a JSON object.
func attribute(data []byte, by, channel string) []byte {
	var m map[string]json.RawMessage
	if json.Unmarshal(data, &m) != nil || m == nil {
		return data
	}
	delete(m, "by")
	delete(m, "channel")
	if by != "" {
		m["by"], _ = json.Marshal(by)
	}
	if channel != "" {
		m["channel"], _ = json.Marshal(channel)
	}
	out, err := json.Marshal(m)
	if err != nil {
		return data
	}
	return out
}

// AnswerForm says what an answer is, with text (a malformed answer's)
// as its content: `an answer is a JSON object such as
// {"content":"hello"}` (SPEC §5.2: status ok by default).
func AnswerForm(text []byte) string {
	content := strings.TrimSpace(string(text))
	var s string
	if json.Unmarshal([]byte(content), &s) == nil {
		content = s // a JSON string: its text
	}
	if content == "" || strings.HasPrefix(content, "{") {
		content = "the answer"
	}
	var example strings.Builder
	enc := json.NewEncoder(&example)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(map[string]string{"content": content})
	return "an answer is a JSON object such as " + strings.TrimSpace(example.String())
}

// publish publishes data in a producer span: the message carries its
// trace context, to which the run's approval span links (SPEC §14).
func (d *Desk) publish(ctx context.Context, conv string, s *conversation.Summary, kind conversation.ArrivalKind, task string, data []byte, channel string) (string, error) {
	ctx, span := telemetry.Tracer(d.cfg.TracerProvider).Start(ctx, "send "+string(kind), trace.WithSpanKind(trace.SpanKindProducer))
	if span.IsRecording() {
		span.SetAttributes(
			telemetry.MessagingSystem.String(telemetry.MessagingSystemNATS),
			telemetry.MessagingOperationType.String("send"),
			telemetry.GenAIConversationID.String(conv),
			telemetry.OffloadTaskID.String(task))
		if channel != "" {
			span.SetAttributes(telemetry.OffloadDecisionChannel.String(channel))
		}
	}
	subject, err := d.cfg.Records.Publish(ctx, conv, s, kind, task, data)
	if err != nil {
		if span.IsRecording() {
			span.SetStatus(codes.Error, err.Error())
		}
		var re *conversation.RefusedError
		if errors.As(err, &re) {
			d.cfg.Logger.Info("refused", slog.String("kind", string(kind)), slog.String("conversation_id", conv),
				slog.String("task_id", task), slog.String("reason", re.Reason), slog.Any("error", re.Err))
		}
	}
	span.End()
	return subject, err
}

// checkArgs checks edited arguments of pending call t of agent's
// conversation against its tool's schema and returns them compact.
func (d *Desk) checkArgs(ctx context.Context, agent string, t deferred.PendingTask, edited string) (json.RawMessage, error) {
	tl, err := d.cfg.Tools(ctx, agent, t.Tool)
	if err != nil {
		return nil, &ArgsError{Task: t.TaskID, Message: err.Error()}
	}
	args, err := tl.ParseArgs(edited)
	var ve *tool.ValidationError
	if errors.As(err, &ve) {
		return nil, &ArgsError{Task: t.TaskID, Message: argsMessage(ve.Message)}
	}
	if err != nil {
		return nil, &ArgsError{Task: t.TaskID, Message: err.Error()}
	}
	return args, nil
}

// Changes returns a channel that receives a signal whenever what waits
// may have changed (a record written or deleted, a decision or an answer
// published), closed once ctx ends.
func (d *Desk) Changes(ctx context.Context) (<-chan struct{}, error) {
	return d.cfg.Records.Changes(ctx)
}

// recordOf returns conversation id's pending record, an empty one when
// the store holds none (a live run may have announced approvals before
// its first record).
func (d *Desk) recordOf(ctx context.Context, id string) (*conversation.Summary, error) {
	s, err := d.cfg.Records.Get(ctx, id)
	if errors.Is(err, conversation.ErrNotFound) {
		return &conversation.Summary{ConversationID: id}, nil
	}
	return s, err
}
