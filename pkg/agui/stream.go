package agui

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/ag-ui-protocol/ag-ui/sdks/community/go/pkg/core/events"

	"github.com/offload-dev/offload/pkg/conversation"
	"github.com/offload-dev/offload/pkg/deferred"
	"github.com/offload-dev/offload/pkg/message"
	"github.com/offload-dev/offload/pkg/service"
	"github.com/offload-dev/offload/pkg/session"
)

// stream is one input's answer: the AG-UI events of one AG-UI run.
type stream struct {
	f      *Face
	ctx    context.Context
	emit   Emit
	thread string // the input's threadId
	run    string // the input's runId
	conv   string // the thread's conversation
	agent  string

	// What the translation of the core's events keeps open.
	step    int    // the model requests started (the open step's number)
	stepped bool   // a step is open
	text    string // the open text message's ID ("": none)
	// streamed: text deltas came since the step started.
	streamed bool
	results  int // TOOL_CALL_RESULTs sent (their message IDs)

	// tasks are the tool call IDs of the background tasks started, by
	// task ID.
	tasks map[string]string

	// join is set for a stream joined (GET …/events): each event has an
	// ID a reconnect resumes after (see [Face.Join]).
	join *joinPos
}

// send writes ev, timestamped by the face's clock; on a joined stream,
// with its ID, unless a reconnect's client has it already.
func (s *stream) send(ev events.Event) error {
	ev.SetTimestamp(s.f.cfg.Now().UnixMilli())
	if s.join == nil {
		return s.emit("", ev)
	}
	id, seen := s.join.next()
	if seen {
		return nil
	}
	return s.emit(id, ev)
}

// runError ends the stream with a RUN_ERROR of code saying msg.
func (s *stream) runError(code, msg string) error {
	if err := s.closeStep(); err != nil {
		return err
	}
	return s.send(events.NewRunErrorEvent(msg, events.WithErrorCode(code), events.WithRunID(s.run)))
}

// follow watches the conversation's events, calls act once the watch has
// begun (so that no event of what it starts is missed), and translates
// each event until the conversation's next final event. When act
// reports it started nothing the answer is the stored conversation's;
// when it fails, a RUN_ERROR saying why.
func (s *stream) follow(act func() (started bool, err error)) error {
	ctx, cancel := context.WithCancel(s.ctx)
	defer cancel()
	var (
		acted   bool // the watch began and act was called
		started bool
		actErr  error
		sendErr error
		ended   bool
	)
	err := s.f.cfg.Core.Watch(ctx, s.conv, 0, func() {
		acted = true
		started, actErr = act()
		if !started || actErr != nil {
			cancel()
		}
	}, func(_ uint64, raw json.RawMessage) bool {
		var done bool
		done, sendErr = s.translate(raw)
		ended = done
		return sendErr == nil && !done
	})
	switch {
	case sendErr != nil:
		return sendErr
	case !acted && s.ctx.Err() == nil:
		// The watch did not begin: nothing was started or published.
		if err == nil {
			err = errors.New("the watch ended before it began")
		}
		return s.fail(err)
	case actErr != nil:
		return s.fail(actErr)
	case !started && s.ctx.Err() == nil:
		return s.fromStore("", nil)
	case ended:
		return nil
	case s.ctx.Err() != nil:
		return s.ctx.Err()
	case err == nil:
		err = errors.New("the conversation's events ended before its run did")
	}
	s.f.cfg.Logger.Warn("agui: watch", "conversation_id", s.conv, "error", err)
	return s.runError("watch", "the conversation's events could not be followed: "+err.Error()+"; its state: GET /v1/conversations/"+s.conv)
}

// fail ends the stream with the RUN_ERROR of err, a refusal of the core
// or the desk.
func (s *stream) fail(err error) error {
	var (
		pe *session.PendingError
		ce *conversation.ClaimedError
		re *conversation.RefusedError
		ie *InputError
	)
	code := "internal"
	switch {
	case errors.As(err, &ie):
		code = ie.Code
	case errors.As(err, &pe), errors.Is(err, session.ErrNothingToResume):
		code = "pending"
	case errors.As(err, &ce), errors.Is(err, conversation.ErrClaimed):
		code = "running"
	case errors.As(err, &re):
		code = re.Reason
	case errors.Is(err, service.ErrUnknownAgent):
		code = "unknown_agent"
	case errors.Is(err, service.ErrOtherAgent):
		code = "other_agent"
	case errors.Is(err, service.ErrClosed):
		code = "closing"
	}
	return s.runError(code, err.Error())
}

// translate sends the AG-UI events of one of the core's events; done
// once it was the run's final event (the stream has ended).
func (s *stream) translate(raw json.RawMessage) (done bool, err error) {
	var ev coreEvent
	if err := json.Unmarshal(raw, &ev); err != nil {
		s.f.cfg.Logger.Warn("agui: an event that is not one skipped", "conversation_id", s.conv, "error", err)
		return false, nil
	}
	switch ev.Type {
	case "model_request_started":
		if err := s.closeStep(); err != nil {
			return false, err
		}
		s.step++
		s.stepped, s.streamed = true, false
		return false, s.send(events.NewStepStartedEvent(s.stepName()))
	case "model_request_retry":
		if err := s.closeText(); err != nil {
			return false, err
		}
		return false, s.send(events.NewCustomEvent(eventRetry, events.WithValue(map[string]any{"attempt": ev.Attempt, "reason": ev.Reason})))
	case "text_delta":
		if ev.Delta == "" {
			return false, nil
		}
		s.streamed = true
		if s.text == "" {
			s.text = s.messageID()
			if err := s.send(events.NewTextMessageStartEvent(s.text, events.WithRole("assistant"))); err != nil {
				return false, err
			}
		}
		return false, s.send(events.NewTextMessageContentEvent(s.text, ev.Delta))
	case "tool_call":
		if err := s.closeText(); err != nil {
			return false, err
		}
		args := string(ev.Args)
		if len(ev.Args) > 0 && ev.Args[0] == '"' {
			_ = json.Unmarshal(ev.Args, &args) // arguments that are not JSON, as the model sent them
		}
		for _, e := range []events.Event{
			events.NewToolCallStartEvent(ev.ToolCallID, ev.Tool, events.WithParentMessageID(s.messageID())),
			events.NewToolCallArgsEvent(ev.ToolCallID, args),
			events.NewToolCallEndEvent(ev.ToolCallID),
		} {
			if e, ok := e.(*events.ToolCallArgsEvent); ok && e.Delta == "" {
				continue
			}
			if err := s.send(e); err != nil {
				return false, err
			}
		}
		return false, nil
	case "tool_result":
		if ev.Outcome == "retry" {
			return false, nil // a retry prompt: the model calls again
		}
		return false, s.result(ev.ToolCallID, message.ContentText(ev.Content))
	case "background_task_started":
		if s.tasks == nil {
			s.tasks = map[string]string{}
		}
		s.tasks[ev.TaskID] = ev.ToolCallID
		return false, s.send(events.NewCustomEvent(eventBackground, events.WithValue(map[string]any{
			"task_id": ev.TaskID, "tool": ev.Tool, "tool_call_id": ev.ToolCallID, "status": "started"})))
	case "background_task_finished":
		// The outcome reaches the model as a follow-up; the call's
		// second result (the acknowledgement was its first) is a
		// completed task's result, or says how it ended. The event names the task, not the call: a task this
		// stream did not see start is told as a CUSTOM event alone.
		id, ok := s.tasks[ev.TaskID]
		if !ok || id == "" {
			return false, s.send(events.NewCustomEvent(eventBackground, events.WithValue(map[string]any{
				"task_id": ev.TaskID, "tool": ev.Tool, "status": ev.Status})))
		}
		if ev.Status == "completed" && len(ev.Content) > 0 {
			return false, s.result(id, message.ContentText(ev.Content)) // its result, as it arrives
		}
		return false, s.result(id, fmt.Sprintf("background task %s %s", ev.TaskID, ev.Status))
	case "deferred_tool_results":
		// The answers of non-blocking external calls, applied: their
		// results arrive now.
		for id, v := range ev.Calls {
			if err := s.result(id, message.ContentText(v)); err != nil {
				return false, err
			}
		}
		return false, nil
	case "progress":
		return false, s.send(events.NewCustomEvent(eventProgress, events.WithValue(map[string]any{
			"task_id": ev.TaskID, "tool": ev.Tool, "tool_call_id": ev.ToolCallID, "message": ev.Message, "fraction": ev.Fraction})))
	case "final":
		return true, s.final(ev)
	}
	return false, nil
}

// coreEvent is the JSON of a run event (SPEC §6.3: its type, and the
// fields of the types this face translates), read as any face reads it,
// not through the loop's package.
type coreEvent struct {
	Type       string                     `json:"type"`
	RunID      string                     `json:"run_id"`
	Delta      string                     `json:"delta"`
	Attempt    int                        `json:"attempt"`
	Reason     string                     `json:"reason"`
	ToolCallID string                     `json:"tool_call_id"`
	Tool       string                     `json:"tool"`
	Args       json.RawMessage            `json:"args"`
	Outcome    string                     `json:"outcome"`
	Content    json.RawMessage            `json:"content"`
	TaskID     string                     `json:"task_id"`
	Status     string                     `json:"status"`
	Message    string                     `json:"message"`
	Fraction   *float64                   `json:"fraction"`
	Output     string                     `json:"output"`
	Error      string                     `json:"error"`
	Pending    []deferred.PendingTask     `json:"pending"`
	Calls      map[string]json.RawMessage `json:"calls"`
}

// result sends the TOOL_CALL_RESULT of call id.
func (s *stream) result(id, content string) error {
	if err := s.closeText(); err != nil {
		return err
	}
	s.results++
	if content == "" {
		content = "null"
	}
	return s.send(events.NewToolCallResultEvent(s.run+"-result-"+strconv.Itoa(s.results), id, content))
}

// stepName names the open step: the run's model request n.
func (s *stream) stepName() string { return "model_request_" + strconv.Itoa(s.step) }

// messageID is the ID of the assistant message of the open step (its
// text and its tool calls).
func (s *stream) messageID() string { return s.run + "-step-" + strconv.Itoa(s.step) }

// closeText ends the open text message, if any.
func (s *stream) closeText() error {
	if s.text == "" {
		return nil
	}
	id := s.text
	s.text = ""
	return s.send(events.NewTextMessageEndEvent(id))
}

// closeStep ends the open text message and step, if any.
func (s *stream) closeStep() error {
	if err := s.closeText(); err != nil {
		return err
	}
	if !s.stepped {
		return nil
	}
	s.stepped = false
	return s.send(events.NewStepFinishedEvent(s.stepName()))
}

// final ends the stream as the run's final event says. The output of a
// run whose model does not stream (no text deltas in its last step) is
// sent as one text message.
func (s *stream) final(ev coreEvent) error {
	if err := s.closeText(); err != nil {
		return err
	}
	if ev.Status == "finished" && ev.Output != "" && !s.streamed {
		id := s.messageID()
		for _, e := range []events.Event{events.NewTextMessageStartEvent(id, events.WithRole("assistant")),
			events.NewTextMessageContentEvent(id, ev.Output), events.NewTextMessageEndEvent(id)} {
			if err := s.send(e); err != nil {
				return err
			}
		}
	}
	if err := s.closeStep(); err != nil {
		return err
	}
	switch ev.Status {
	case "finished", "paused":
		return s.fromStore(ev.Output, &ev)
	}
	msg := ev.Error
	if msg == "" {
		msg = "the run " + ev.Status
	}
	return s.send(events.NewRunErrorEvent(msg, events.WithErrorCode(ev.Status), events.WithRunID(s.run)))
}
