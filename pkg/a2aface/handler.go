package a2aface

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"slices"
	"strconv"
	"strings"

	"github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2asrv"

	"github.com/offload-dev/offload/pkg/conversation"
	"github.com/offload-dev/offload/pkg/protocol"
	"github.com/offload-dev/offload/pkg/service"
	"github.com/offload-dev/offload/pkg/session"
)

// handler serves the A2A requests of one caller to one agent.
type handler struct {
	f     *Face
	agent string
	c     Caller
}

var _ a2asrv.RequestHandler = (*handler)(nil)

// ctx is ctx saying who asks the core, and for which tenant.
func (h *handler) ctx(ctx context.Context) context.Context {
	ctx = service.WithStartedBy(ctx, h.c.Name)
	if h.c.Tenant != "" {
		ctx = service.WithTenant(ctx, h.c.Tenant)
	}
	return ctx
}

// load returns the caller's record of task id sent to this agent (not
// found: another token's, another agent's, or none).
func (h *handler) load(ctx context.Context, id a2a.TaskID) (*Record, error) {
	if id == "" {
		return nil, fmt.Errorf("%w: the task ID is empty", a2a.ErrInvalidParams)
	}
	rec, _, err := h.f.tasks.get(ctx, h.c.Name, string(id))
	if errors.Is(err, conversation.ErrNotFound) || err == nil && rec.Agent != h.agent {
		return nil, fmt.Errorf("%w: %s", a2a.ErrTaskNotFound, id)
	}
	if err != nil {
		return nil, err
	}
	return rec, nil
}

// current returns the caller's task id as it is now.
func (h *handler) current(ctx context.Context, id a2a.TaskID) (*a2a.Task, error) {
	rec, err := h.load(ctx, id)
	if err != nil {
		return nil, err
	}
	return h.f.task(ctx, rec)
}

// GetTask implements a2asrv.RequestHandler.
func (h *handler) GetTask(ctx context.Context, req *a2a.GetTaskRequest) (*a2a.Task, error) {
	t, err := h.current(ctx, req.ID)
	if err != nil {
		return nil, err
	}
	trimHistory(t, req.HistoryLength)
	return t, nil
}

// trimHistory keeps the last n messages of t's history (all: n nil).
func trimHistory(t *a2a.Task, n *int) {
	if n != nil && *n >= 0 && *n < len(t.History) {
		t.History = t.History[len(t.History)-*n:]
	}
}

// listMax bounds a page of ListTasks; listDefault is its size unasked.
const (
	listMax     = 100
	listDefault = 50
)

// ListTasks implements a2asrv.RequestHandler: the caller's tasks of
// this agent, the latest changed first, in pages (pageToken: the offset
// of the next).
func (h *handler) ListTasks(ctx context.Context, req *a2a.ListTasksRequest) (*a2a.ListTasksResponse, error) {
	size := cmp.Or(req.PageSize, listDefault)
	if size < 0 || size > listMax {
		return nil, fmt.Errorf("%w: pageSize is 1 to %d", a2a.ErrInvalidParams, listMax)
	}
	switch req.Status {
	case a2a.TaskStateUnspecified, a2a.TaskStateSubmitted, a2a.TaskStateWorking, a2a.TaskStateInputRequired,
		a2a.TaskStateCompleted, a2a.TaskStateFailed, a2a.TaskStateCanceled, a2a.TaskStateRejected, a2a.TaskStateAuthRequired:
	default:
		return nil, fmt.Errorf("%w: status %q is not a task state", a2a.ErrInvalidParams, req.Status)
	}
	from := 0
	if req.PageToken != "" {
		n, err := strconv.Atoi(req.PageToken)
		if err != nil || n < 0 {
			return nil, fmt.Errorf("%w: pageToken is not one of this list's", a2a.ErrInvalidParams)
		}
		from = n
	}
	var tasks []*a2a.Task
	err := h.f.tasks.list(ctx, h.c.Name, func(rec *Record) error {
		if rec.Agent != h.agent || req.ContextID != "" && rec.ContextID != req.ContextID {
			return nil
		}
		t, err := h.f.task(ctx, rec)
		if err != nil {
			return err
		}
		if req.Status != "" && t.Status.State != req.Status ||
			req.StatusTimestampAfter != nil && t.Status.Timestamp != nil && !t.Status.Timestamp.After(*req.StatusTimestampAfter) {
			return nil
		}
		tasks = append(tasks, t)
		return nil
	})
	if err != nil {
		return nil, err
	}
	slices.SortFunc(tasks, func(a, b *a2a.Task) int {
		if c := b.Status.Timestamp.Compare(*a.Status.Timestamp); c != 0 {
			return c
		}
		return strings.Compare(string(b.ID), string(a.ID))
	})
	out := &a2a.ListTasksResponse{TotalSize: len(tasks), PageSize: size, Tasks: []*a2a.Task{}}
	if from < len(tasks) {
		end := min(from+size, len(tasks))
		out.Tasks = tasks[from:end]
		if end < len(tasks) {
			out.NextPageToken = strconv.Itoa(end)
		}
	}
	for _, t := range out.Tasks {
		trimHistory(t, req.HistoryLength)
		if !req.IncludeArtifacts {
			t.Artifacts = nil
		}
	}
	return out, nil
}

// CancelTask implements a2asrv.RequestHandler: the conversation's live
// run is interrupted (SIGINT's semantics, SPEC §11) and the task is
// CANCELED; a task waiting for input is CANCELED as it is (its calls
// still wait in the inbox).
func (h *handler) CancelTask(ctx context.Context, req *a2a.CancelTaskRequest) (*a2a.Task, error) {
	rec, err := h.load(ctx, req.ID)
	if err != nil {
		return nil, err
	}
	t, err := h.f.task(ctx, rec)
	if err != nil {
		return nil, err
	}
	switch {
	case t.Status.State == a2a.TaskStateCanceled:
		return t, nil
	case t.Status.State.Terminal():
		return nil, fmt.Errorf("%w: task %s is %s", a2a.ErrTaskNotCancelable, req.ID, t.Status.State)
	case !h.c.Start:
		return nil, fmt.Errorf("%w: only an operator cancels a task", a2a.ErrUnauthorized)
	}
	err = h.f.cfg.Core.Cancel(h.ctx(ctx), rec.Conversation)
	if err != nil && !errors.Is(err, service.ErrNotRunning) && !errors.Is(err, conversation.ErrNotFound) {
		return nil, err
	}
	settled, err := h.f.settle(ctx, rec, a2a.TaskStateCanceled, "", "cancelled by "+h.c.Name)
	if err != nil {
		return nil, err
	}
	return h.f.task(ctx, settled)
}

// SendMessage implements a2asrv.RequestHandler: the task once it waits
// for input or has ended (at once with configuration.returnImmediately).
func (h *handler) SendMessage(ctx context.Context, req *a2a.SendMessageRequest) (a2a.SendMessageResult, error) {
	op, err := h.prepare(ctx, req)
	if err != nil {
		return nil, err
	}
	if req.Config != nil && req.Config.ReturnImmediately {
		if _, err := op.act(); err != nil {
			return nil, err
		}
		return h.current(ctx, op.id)
	}
	t, err := h.await(ctx, op.rec, op.act, nil)
	if err != nil {
		return nil, err
	}
	if req.Config != nil {
		trimHistory(t, req.Config.HistoryLength)
	}
	return t, nil
}

// SendStreamingMessage implements a2asrv.RequestHandler: the task, then
// its status updates (WORKING when its run goes on), its output as an
// artifact, and its status once it waits for input or has ended.
func (h *handler) SendStreamingMessage(ctx context.Context, req *a2a.SendMessageRequest) iter.Seq2[a2a.Event, error] {
	return func(yield func(a2a.Event, error) bool) {
		op, err := h.prepare(ctx, req)
		if err != nil {
			yield(nil, err)
			return
		}
		first, err := h.f.task(ctx, op.rec)
		if err != nil {
			yield(nil, err)
			return
		}
		if !yield(first, nil) {
			return
		}
		h.stream(ctx, op.rec, func() *a2a.Task { return first }, op.act, yield)
	}
}

// SubscribeToTask implements a2asrv.RequestHandler: the task as it is
// (read once the watch of its conversation has begun: nothing after it
// is missed), then its updates until it waits for input again or ends (a
// task that has ended is refused, as A2A says).
func (h *handler) SubscribeToTask(ctx context.Context, req *a2a.SubscribeToTaskRequest) iter.Seq2[a2a.Event, error] {
	return func(yield func(a2a.Event, error) bool) {
		rec, err := h.load(ctx, req.ID)
		if err != nil {
			yield(nil, err)
			return
		}
		var first *a2a.Task
		ended := false
		h.stream(ctx, rec, func() *a2a.Task { return first }, func() (bool, error) {
			t, err := h.f.task(ctx, rec)
			switch {
			case err != nil:
				return false, err
			case t.Status.State.Terminal():
				return false, fmt.Errorf("%w: task %s is %s", a2a.ErrUnsupportedOperation, req.ID, t.Status.State)
			}
			first = t
			if !yield(t, nil) {
				ended = true
				return false, errStopped
			}
			return true, nil
		}, func(ev a2a.Event, err error) bool {
			return !ended && yield(ev, err)
		})
	}
}

// stream yields the updates of rec's task after the first (first, once
// act has run): WORKING at the run's first event (when the first was
// not), then how the wait ended.
func (h *handler) stream(ctx context.Context, rec *Record, first func() *a2a.Task, act func() (bool, error), yield func(a2a.Event, error) bool) {
	working, stopped := false, false
	t, err := h.await(ctx, rec, act, func(coreEvent) bool {
		if working || first().Status.State == a2a.TaskStateWorking {
			working = true
			return true
		}
		working = true
		if !yield(a2a.NewStatusUpdateEvent(first(), a2a.TaskStateWorking, nil), nil) {
			stopped = true
			return false
		}
		return true
	})
	switch {
	case stopped || errors.Is(err, errStopped):
		return
	case err != nil:
		yield(nil, err)
		return
	}
	if t.Status.State == a2a.TaskStateCompleted {
		ev := a2a.NewArtifactEvent(t, outputArtifact(outputOf(t)).Parts...)
		ev.Artifact.ID, ev.Artifact.Name, ev.LastChunk = OutputArtifact, "output", true
		if !yield(ev, nil) {
			return
		}
	}
	ev := &a2a.TaskStatusUpdateEvent{TaskID: t.ID, ContextID: t.ContextID, Status: t.Status, Metadata: t.Metadata}
	yield(ev, nil)
}

// outputOf is the text of a completed task's output artifact.
func outputOf(t *a2a.Task) string {
	for _, a := range t.Artifacts {
		if a.ID == OutputArtifact && len(a.Parts) > 0 {
			return a.Parts[0].Text()
		}
	}
	return ""
}

// errStopped ends a follow whose consumer went.
var errStopped = errors.New("a2aface: the consumer stopped")

// await calls act once the watch of rec's conversation has begun (it
// reports whether it started or published anything the conversation
// goes on with), gives each of the conversation's events to each, and
// returns the task once it waits for input or has ended: while it
// works (its run goes on, or it waits on the workers) the wait goes on,
// a watch at a time, each begun before the task is read again.
func (h *handler) await(ctx context.Context, rec *Record, act func() (bool, error), each func(coreEvent) bool) (*a2a.Task, error) {
	for {
		err := h.f.follow(ctx, rec.Conversation, act, each)
		if errors.Is(err, errStopped) {
			return nil, err
		}
		if err != nil {
			return nil, err
		}
		t, err := h.current(ctx, a2a.TaskID(rec.ID))
		if err != nil {
			return nil, err
		}
		if t.Status.State != a2a.TaskStateWorking && t.Status.State != a2a.TaskStateSubmitted {
			return t, nil
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		act = func() (bool, error) {
			now, err := h.current(ctx, a2a.TaskID(rec.ID))
			if err != nil {
				return false, err
			}
			return now.Status.State == a2a.TaskStateWorking || now.Status.State == a2a.TaskStateSubmitted, nil
		}
	}
}

// coreEvent is the JSON of a run event (SPEC §6.3), the fields this face
// reads.
type coreEvent struct {
	Type   string `json:"type"`
	Status string `json:"status"`
}

// follow watches conversation conv, calls act once the watch has begun,
// and gives each event to each (when set) until the conversation's next
// final event. When act reports it started nothing, it returns at once.
func (f *Face) follow(ctx context.Context, conv string, act func() (bool, error), each func(coreEvent) bool) error {
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		acted, started, ended, stopped bool
		actErr                         error
	)
	err := f.cfg.Core.Watch(wctx, conv, 0, func() {
		acted = true
		started, actErr = act()
		if !started || actErr != nil {
			cancel()
		}
	}, func(_ uint64, raw json.RawMessage) bool {
		var ev coreEvent
		if json.Unmarshal(raw, &ev) != nil {
			return true
		}
		if each != nil && !each(ev) {
			stopped = true
			return false
		}
		ended = ev.Type == "final"
		return !ended
	})
	switch {
	case actErr != nil:
		return actErr
	case stopped:
		return errStopped
	case !acted:
		if err == nil {
			err = errors.New("the watch ended before it began")
		}
		return fmt.Errorf("a2aface: conversation %s: %w", conv, err)
	case !started, ended:
		return nil
	case ctx.Err() != nil:
		return ctx.Err()
	case err == nil:
		err = errors.New("the conversation's events ended before its run did")
	}
	return fmt.Errorf("a2aface: conversation %s: %w", conv, err)
}

// operation is a message's effect, checked: the task it is of and what
// starts it (a turn, or the input's decisions and answers).
type operation struct {
	id  a2a.TaskID
	rec *Record
	act func() (bool, error)
}

// prepare checks message req and returns what it does: a new task (a
// turn on its text, in its context's conversation) or the input of the
// task it names.
func (h *handler) prepare(ctx context.Context, req *a2a.SendMessageRequest) (*operation, error) {
	m := req.Message
	switch {
	case m == nil:
		return nil, fmt.Errorf("%w: the message is required", a2a.ErrInvalidParams)
	case len(m.Parts) == 0:
		return nil, fmt.Errorf("%w: the message has no parts", a2a.ErrInvalidParams)
	case m.Role != a2a.MessageRoleUser:
		return nil, fmt.Errorf("%w: the message's role is not ROLE_USER", a2a.ErrInvalidParams)
	}
	var push *a2a.PushConfig
	if req.Config != nil && req.Config.PushConfig != nil {
		if h.f.push == nil {
			return nil, fmt.Errorf("%w: this agent sends no push notifications", a2a.ErrPushNotificationNotSupported)
		}
		push = req.Config.PushConfig
		if err := h.f.push.checkPush(push); err != nil {
			return nil, err
		}
	}
	in, err := inputOf(m)
	if err != nil {
		return nil, err
	}
	var op *operation
	switch {
	case m.TaskID != "":
		op, err = h.input(ctx, m, in)
	case !in.empty():
		return nil, fmt.Errorf("%w: decisions and answers go to the task that waits for them (the message's taskId)", a2a.ErrInvalidParams)
	default:
		op, err = h.turn(ctx, m)
	}
	if err != nil || push == nil {
		return op, err
	}
	// The message's push config is the task's before anything of the
	// message runs: its first change is sent.
	c := *push
	c.TaskID = op.id
	if _, err := h.CreateTaskPushConfig(ctx, &c); err != nil {
		return nil, err
	}
	return op, nil
}

// turn creates the task of a new turn on m's text, in m's context's
// conversation (a new one when m names none).
func (h *handler) turn(ctx context.Context, m *a2a.Message) (*operation, error) {
	if !h.c.Start {
		return nil, fmt.Errorf("%w: only an operator sends a prompt", a2a.ErrUnauthorized)
	}
	prompt := textOf(m)
	if strings.TrimSpace(prompt) == "" {
		return nil, fmt.Errorf("%w: the message has no text (the prompt)", a2a.ErrInvalidParams)
	}
	contextID, conv := m.ContextID, m.ContextID
	switch {
	case contextID == "":
		conv = protocol.NewID()
		contextID = conv
	default:
		if _, err := protocol.ParseID(contextID); err != nil {
			if conv, err = h.f.cfg.Threads.Conversation(ctx, h.agent, contextID); err != nil {
				return nil, err
			}
		}
		if err := h.settleBefore(ctx, conv); err != nil {
			return nil, err
		}
	}
	now := h.f.cfg.Now().UTC()
	rec := &Record{ID: protocol.NewID(), ContextID: contextID, Conversation: conv, Agent: h.agent, Owner: h.c.Name,
		Created: now, Updated: now}
	// A message sent again (a client's retry) is answered with the task
	// the first one started: no second turn.
	if m.ID == "" {
		return nil, fmt.Errorf("%w: the message has no messageId", a2a.ErrInvalidParams)
	}
	first, err := h.f.cfg.Tasks.Message(ctx, h.c.Name, m.ID, rec.ID)
	if err != nil {
		return nil, err
	}
	if first != rec.ID {
		was, err := h.load(ctx, a2a.TaskID(first))
		switch {
		case err == nil:
			return &operation{id: a2a.TaskID(first), rec: was, act: func() (bool, error) { return false, nil }}, nil
		case !errors.Is(err, a2a.ErrTaskNotFound):
			return nil, err
		}
		// Mapped by a request that ended before it created the task:
		// this one creates it.
		rec.ID = first
	}
	msg := *m
	msg.TaskID, msg.ContextID = a2a.TaskID(rec.ID), contextID
	rec.History = []*a2a.Message{kept(&msg)}
	if err := h.f.tasks.create(ctx, rec); err != nil {
		return nil, err
	}
	op := &operation{id: a2a.TaskID(rec.ID), rec: rec}
	op.act = func() (bool, error) {
		if _, err := h.f.cfg.Core.StartThread(h.ctx(ctx), h.agent, prompt, conv); err != nil {
			if _, serr := h.f.settle(context.WithoutCancel(ctx), rec, a2a.TaskStateFailed, "", err.Error()); serr != nil {
				h.f.cfg.Logger.Warn("a2aface: a task not started not recorded failed", "task", rec.ID, "error", serr)
			}
			return false, refusal(err)
		}
		started, err := h.f.change(context.WithoutCancel(ctx), rec.Owner, rec.ID, func(r *Record) bool {
			if r.Started {
				return false
			}
			r.Started = true
			return true
		})
		if err != nil {
			return false, err
		}
		*rec = *started
		return true, nil
	}
	return op, nil
}

// settleBefore records how the caller's tasks of conversation conv that
// have not ended yet ended, before a new turn of it starts (they were
// turns of it before; once the new one runs, the conversation's state is
// its).
func (h *handler) settleBefore(ctx context.Context, conv string) error {
	var open []*Record
	err := h.f.tasks.list(ctx, h.c.Name, func(rec *Record) error {
		if rec.Conversation == conv && rec.State == "" && rec.Started {
			open = append(open, rec)
		}
		return nil
	})
	if err != nil {
		return err
	}
	for _, rec := range open {
		if _, err := h.f.task(ctx, rec); err != nil {
			return err
		}
	}
	return nil
}

// refusal is the A2A error of the core's refusal to start a turn.
func refusal(err error) error {
	var (
		pe *session.PendingError
		ce *conversation.ClaimedError
	)
	switch {
	case errors.As(err, &pe):
		return fmt.Errorf("%w: the conversation waits for calls (answer its task that waits for input): %w", a2a.ErrInvalidParams, err)
	case errors.As(err, &ce), errors.Is(err, conversation.ErrClaimed):
		return fmt.Errorf("%w: a run of the conversation is live: %w", a2a.ErrInvalidParams, err)
	case errors.Is(err, service.ErrOtherAgent), errors.Is(err, service.ErrUnknownAgent):
		return fmt.Errorf("%w: %w", a2a.ErrInvalidParams, err)
	}
	return err
}

// textOf is the text of m's text parts.
func textOf(m *a2a.Message) string {
	var b strings.Builder
	for _, p := range m.Parts {
		if t, ok := p.Content.(a2a.Text); ok {
			if b.Len() > 0 {
				b.WriteString("\n")
			}
			b.WriteString(string(t))
		}
	}
	return b.String()
}

// pushTask returns the caller's record of task id, the face's pushes
// enabled.
func (h *handler) pushTask(ctx context.Context, id a2a.TaskID) (*Record, error) {
	if h.f.push == nil {
		return nil, a2a.ErrPushNotificationNotSupported
	}
	return h.load(ctx, id)
}

// GetTaskPushConfig implements a2asrv.RequestHandler: the caller's
// task's config.
func (h *handler) GetTaskPushConfig(ctx context.Context, req *a2a.GetTaskPushConfigRequest) (*a2a.PushConfig, error) {
	rec, err := h.pushTask(ctx, req.TaskID)
	if err != nil {
		return nil, err
	}
	return pushConfig(rec, req.ID)
}

// ListTaskPushConfigs implements a2asrv.RequestHandler: the caller's
// task's configs (one page: a task has at most pushMax).
func (h *handler) ListTaskPushConfigs(ctx context.Context, req *a2a.ListTaskPushConfigRequest) (*a2a.ListTaskPushConfigResponse, error) {
	rec, err := h.pushTask(ctx, req.TaskID)
	if err != nil {
		return nil, err
	}
	return &a2a.ListTaskPushConfigResponse{Configs: append([]*a2a.PushConfig{}, rec.Push...)}, nil
}

// CreateTaskPushConfig implements a2asrv.RequestHandler: the config is
// checked (an http(s) URL; an address not allowed refused), stored in
// the caller's task's record (replacing one of the same ID; an ID given
// when it has none), and the task watched by every replica's sweep.
func (h *handler) CreateTaskPushConfig(ctx context.Context, req *a2a.PushConfig) (*a2a.PushConfig, error) {
	rec, err := h.pushTask(ctx, req.TaskID)
	if err != nil {
		return nil, err
	}
	if err := h.f.push.checkPush(req); err != nil {
		return nil, err
	}
	c := *req
	c.Tenant = ""
	if c.ID == "" {
		c.ID = protocol.NewID()
	}
	if _, err := h.f.write(ctx, rec.Owner, rec.ID, func(r *Record) bool {
		r.Push = slices.DeleteFunc(r.Push, func(p *a2a.PushConfig) bool { return p.ID == c.ID })
		r.Push = append(r.Push, &c)
		if len(r.Push) > pushMax {
			r.Push = r.Push[len(r.Push)-pushMax:]
		}
		return true
	}, false); err != nil {
		return nil, err
	}
	if err := h.f.cfg.Tasks.Watch(ctx, rec.Owner, rec.ID); err != nil {
		return nil, err
	}
	return &c, nil
}

// DeleteTaskPushConfig implements a2asrv.RequestHandler: the caller's
// task's config is removed.
func (h *handler) DeleteTaskPushConfig(ctx context.Context, req *a2a.DeleteTaskPushConfigRequest) error {
	rec, err := h.pushTask(ctx, req.TaskID)
	if err != nil {
		return err
	}
	if _, err := pushConfig(rec, req.ID); err != nil {
		return err
	}
	_, err = h.f.write(ctx, rec.Owner, rec.ID, func(r *Record) bool {
		n := len(r.Push)
		r.Push = slices.DeleteFunc(r.Push, func(p *a2a.PushConfig) bool { return p.ID == req.ID })
		return len(r.Push) != n
	}, false)
	return err
}

// GetExtendedAgentCard implements a2asrv.RequestHandler: the cards are
// public and have no extended form.
func (h *handler) GetExtendedAgentCard(context.Context, *a2a.GetExtendedAgentCardRequest) (*a2a.AgentCard, error) {
	return nil, a2a.ErrExtendedCardNotConfigured
}
