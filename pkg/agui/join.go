package agui

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/ag-ui-protocol/ag-ui/sdks/community/go/pkg/core/events"

	"github.com/offload-dev/offload/pkg/conversation"
)

// joinPos numbers the events of a joined stream. An event's ID is
// "<base>.<seq>.<k>": the k-th AG-UI event (from 0) that the core's event
// of sequence seq gave, on a stream whose first core event followed
// sequence base. A reconnect with that ID as Last-Event-ID watches again
// from base and translates again every event up to it without sending
// it (the translation's open messages and steps are what they were),
// then sends the rest: nothing lost, nothing repeated.
type joinPos struct {
	base uint64 // the watch's start: its first event follows it
	seq  uint64 // the core's event being translated
	k    int    // the AG-UI events it gave so far
	// last is the reconnect's Last-Event-ID position (lastSeq 0: none):
	// events up to it are not sent.
	lastSeq uint64
	lastK   int
}

// next returns the ID of the next event, and whether the client has it.
func (p *joinPos) next() (string, bool) {
	k := p.k
	p.k++
	id := strconv.FormatUint(p.base, 10) + "." + strconv.FormatUint(p.seq, 10) + "." + strconv.Itoa(k)
	return id, p.seq < p.lastSeq || p.seq == p.lastSeq && k <= p.lastK
}

// ErrLastEventID is the error of a Last-Event-ID this face did not send.
var ErrLastEventID = errors.New("agui: Last-Event-ID is not an event ID of this stream (<base>.<seq>.<k>)")

// parseEventID parses an ID of [joinPos].
func parseEventID(id string) (base, seq uint64, k int, err error) {
	parts := strings.Split(id, ".")
	if len(parts) != 3 {
		return 0, 0, 0, ErrLastEventID
	}
	base, err1 := strconv.ParseUint(parts[0], 10, 64)
	seq, err2 := strconv.ParseUint(parts[1], 10, 64)
	k, err3 := strconv.Atoi(parts[2])
	if err1 != nil || err2 != nil || err3 != nil || seq <= base || k < 0 {
		return 0, 0, 0, ErrLastEventID
	}
	return base, seq, k, nil
}

// Join streams the AG-UI events of thread of agent's conversation as its
// runs emit them (GET /agui/{agent}/threads/{threadId}/events), from now
// on, or after lastEventID (an ID this stream sent, the SSE
// Last-Event-ID of a reconnect, on any replica), until the run's final
// event: RUN_STARTED (its run ID the core's run), what the run streams,
// then RUN_FINISHED (interrupts when it pauses) or RUN_ERROR. A second
// client watches a thread another drives. ready, if set, is called once
// the watch has begun (the stream may open: no event is missed). It
// returns an *InputError before ready was called, else emit's error or
// ctx's.
func (f *Face) Join(ctx context.Context, agent, thread, lastEventID string, ready func(), emit Emit) error {
	if strings.TrimSpace(thread) == "" {
		return badInput("the thread is empty")
	}
	pos := &joinPos{}
	if lastEventID != "" {
		base, seq, k, err := parseEventID(lastEventID)
		if err != nil {
			return badInput("%s", err.Error())
		}
		pos.base, pos.lastSeq, pos.lastK = base, seq, k
	}
	conv, err := f.conversation(ctx, agent, thread)
	if err != nil {
		return err
	}
	switch st, err := f.cfg.Core.State(ctx, conv); {
	case errors.Is(err, conversation.ErrNotFound):
	case err != nil:
		return err
	case st.Agent != nil && st.Agent.Name != agent:
		return &InputError{Status: 409, Code: "other_agent", Message: fmt.Sprintf("thread %s is not agent %s's", thread, agent)}
	}
	s := &stream{f: f, ctx: ctx, emit: emit, thread: thread, conv: conv, agent: agent, join: pos}
	started, ended := false, false
	var sendErr error
	err = f.cfg.Core.Watch(ctx, conv, pos.base, ready, func(seq uint64, raw json.RawMessage) bool {
		if pos.base == 0 && pos.lastSeq == 0 && !started {
			pos.base = seq - 1
		}
		pos.seq, pos.k = seq, 0
		if !started {
			started = true
			var ev coreEvent
			_ = json.Unmarshal(raw, &ev)
			s.run = ev.RunID
			if sendErr = s.send(events.NewRunStartedEvent(thread, s.run)); sendErr != nil {
				return false
			}
			if sendErr = s.send(events.NewCustomEvent(eventConversation, events.WithValue(map[string]string{"conversation_id": conv}))); sendErr != nil {
				return false
			}
		}
		ended, sendErr = s.translate(raw)
		return sendErr == nil && !ended
	})
	switch {
	case sendErr != nil:
		return sendErr
	case ended || ctx.Err() != nil:
		return ctx.Err()
	case !started:
		return err
	case err == nil:
		err = errors.New("the conversation's events ended before its run did")
	}
	return s.runError("watch", "the conversation's events could not be followed: "+err.Error())
}
