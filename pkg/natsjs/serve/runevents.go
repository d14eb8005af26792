package serve

import (
	"context"
	"encoding/json"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/offload-dev/offload/pkg/agent"
)

// eventAckTimeout bounds how long the end of a run waits for the server
// to acknowledge its events.
const eventAckTimeout = 5 * time.Second

// runEvents stores one run's events in the events stream in the order the
// run emits them, without waiting for each acknowledgement on the run's
// path (an event is what clients watch, not the conversation's state: a
// wake's continuation reaches its model request without a round trip per
// event). Publishes from one connection are stored in the order they
// were sent; [runEvents.wait], at the run's end, waits for every
// acknowledgement, so that a run is done only once its events are stored
// (the final event among them). An event that cannot be stored is logged
// and dropped.
type runEvents struct {
	s *Service

	mu      sync.Mutex // orders the publishes as the run emits the events
	pending []sentEvent
}

// sentEvent is an event published and not yet seen acknowledged.
type sentEvent struct {
	conv, typ string
	ack       jetstream.PubAckFuture
}

// publish stores ev (agent.RunOptions.OnEvent).
func (e *runEvents) publish(ev agent.Event) {
	data, err := json.Marshal(ev)
	if err != nil {
		e.s.log.Warn("event not stored", slog.String("conversation_id", ev.ConversationID), slog.String("type", string(ev.Type)), slog.Any("error", err))
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.reapLocked()
	f, err := e.s.cfg.JetStream.PublishAsync(e.s.eventSubject(ev.ConversationID), data)
	if err != nil {
		e.s.log.Warn("event not stored", slog.String("conversation_id", ev.ConversationID), slog.String("type", string(ev.Type)), slog.Any("error", err))
		return
	}
	e.pending = append(e.pending, sentEvent{conv: ev.ConversationID, typ: string(ev.Type), ack: f})
}

// reapLocked drops the events acknowledged already from the front of
// pending (a long run keeps only those in flight), logging refusals.
func (e *runEvents) reapLocked() {
	for len(e.pending) > 0 {
		p := e.pending[0]
		select {
		case <-p.ack.Ok():
		case err := <-p.ack.Err():
			e.notStored(p, err)
		default:
			return
		}
		e.pending = e.pending[1:]
	}
}

// wait waits, at most eventAckTimeout, for the acknowledgement of every
// event published, logging those the server refused or did not
// acknowledge in time.
func (e *runEvents) wait() {
	e.mu.Lock()
	pending := e.pending
	e.pending = nil
	e.mu.Unlock()
	timeout := time.NewTimer(eventAckTimeout)
	defer timeout.Stop()
	for _, p := range pending {
		select {
		case <-p.ack.Ok():
		case err := <-p.ack.Err():
			e.notStored(p, err)
		case <-timeout.C:
			e.notStored(p, context.DeadlineExceeded)
			// The rest share the deadline: a stalled server answers none.
			timeout.Reset(0)
		}
	}
}

func (e *runEvents) notStored(p sentEvent, err error) {
	e.s.log.Warn("event not stored", slog.String("conversation_id", p.conv), slog.String("type", p.typ), slog.Any("error", err))
}
