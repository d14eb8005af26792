package conformance

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/offload-dev/offload/pkg/protocol"
)

// events is an append-only log that signals every append.
type events[T any] struct {
	mu      sync.Mutex
	items   []T
	changed chan struct{}
}

func newEvents[T any]() *events[T] { return &events[T]{changed: make(chan struct{})} }

func (e *events[T]) add(x T) {
	e.mu.Lock()
	e.items = append(e.items, x)
	close(e.changed)
	e.changed = make(chan struct{})
	e.mu.Unlock()
}

// snapshot returns the items so far and a channel closed at the next add.
func (e *events[T]) snapshot() ([]T, <-chan struct{}) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]T(nil), e.items...), e.changed
}

// wait waits until pred holds for the items, or ctx ends; it returns the
// items last seen and whether pred held.
func (e *events[T]) wait(ctx context.Context, pred func([]T) bool) ([]T, bool) {
	for {
		items, changed := e.snapshot()
		if pred(items) {
			return items, true
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return items, false
		}
	}
}

// ackKind is what a worker sent for a delivery.
type ackKind string

// The kinds of acknowledgement (the payloads of JetStream's ack protocol).
const (
	ackAck        ackKind = "ack"
	ackNak        ackKind = "nak"
	ackInProgress ackKind = "in-progress"
	ackTerm       ackKind = "term"
)

// ackEvent is one acknowledgement seen on the task consumer's ack subjects.
type ackEvent struct {
	seq       uint64 // the task's stream sequence
	delivered uint64 // the delivery it acknowledges (1 = the first)
	kind      ackKind
	at        time.Time
}

// parseAck reads an ack subject, $JS.ACK.<stream>.<consumer>.<delivered>.<stream seq>.…
// (or the v2 form with a domain and an account hash before the stream),
// and its payload.
func parseAck(subject string, data []byte, stream, consumer string) (ackEvent, bool) {
	tokens := strings.Split(subject, ".")
	for i := 2; i+3 < len(tokens); i++ {
		if tokens[i] != stream || tokens[i+1] != consumer {
			continue
		}
		delivered, err1 := strconv.ParseUint(tokens[i+2], 10, 64)
		seq, err2 := strconv.ParseUint(tokens[i+3], 10, 64)
		if err1 != nil || err2 != nil {
			return ackEvent{}, false
		}
		ev := ackEvent{seq: seq, delivered: delivered, at: time.Now()}
		p := string(data)
		switch {
		case p == "" || strings.HasPrefix(p, "+ACK") || strings.HasPrefix(p, "+NXT"):
			ev.kind = ackAck
		case strings.HasPrefix(p, "-NAK"):
			ev.kind = ackNak
		case strings.HasPrefix(p, "+WPI"):
			ev.kind = ackInProgress
		case strings.HasPrefix(p, "+TERM"):
			ev.kind = ackTerm
		default:
			return ackEvent{}, false
		}
		return ev, true
	}
	return ackEvent{}, false
}

// resultMsg is one result the worker published (seen by a core
// subscription: every publish, also one the stream drops as a duplicate).
type resultMsg struct {
	conv    string // the subject's conversation
	subject string
	msgID   string
	data    []byte
	res     protocol.Result
	err     error // the payload does not decode
	at      time.Time
}

// observer subscribes to the acks of the task consumer and to every
// result of the kit's conversations.
type observer struct {
	acks    *events[ackEvent]
	results *events[resultMsg]
	subs    []*nats.Subscription
}

func observe(nc *nats.Conn, subj protocol.Subjects, stream, consumer string) (*observer, error) {
	o := &observer{acks: newEvents[ackEvent](), results: newEvents[resultMsg]()}
	onAck := func(m *nats.Msg) {
		if ev, ok := parseAck(m.Subject, m.Data, stream, consumer); ok {
			o.acks.add(ev)
		}
	}
	onResult := func(m *nats.Msg) {
		_, conv, task, _, err := subj.Parse(m.Subject)
		r := resultMsg{conv: conv, subject: m.Subject, msgID: m.Header.Get(jetstream.MsgIDHeader), data: m.Data, at: time.Now()}
		if err == nil {
			r.res, err = protocol.DecodeResult(m.Data, task, &protocol.DecodeOpts{MaxSize: -1})
		}
		r.err = err
		o.results.add(r)
	}
	for _, s := range []struct {
		subject string
		cb      nats.MsgHandler
	}{
		{"$JS.ACK." + stream + "." + consumer + ".>", onAck},
		{"$JS.ACK.*.*." + stream + "." + consumer + ".>", onAck},
		{subj.All(protocol.KindResult), onResult},
	} {
		sub, err := nc.Subscribe(s.subject, s.cb)
		if err != nil {
			o.close()
			return nil, err
		}
		o.subs = append(o.subs, sub)
	}
	if err := nc.Flush(); err != nil {
		o.close()
		return nil, err
	}
	return o, nil
}

func (o *observer) close() {
	for _, s := range o.subs {
		_ = s.Unsubscribe()
	}
}

// resultsOf returns the results published in conversation conv.
func resultsOf(items []resultMsg, conv string) []resultMsg {
	var out []resultMsg
	for _, r := range items {
		if r.conv == conv {
			out = append(out, r)
		}
	}
	return out
}

// acksOf returns the acknowledgements of the task at stream sequence seq.
func acksOf(items []ackEvent, seq uint64) []ackEvent {
	var out []ackEvent
	for _, a := range items {
		if a.seq == seq {
			out = append(out, a)
		}
	}
	return out
}

// settled returns the first ack or term of a delivery, if any.
func settled(acks []ackEvent) (ackEvent, bool) {
	for _, a := range acks {
		if a.kind == ackAck || a.kind == ackTerm {
			return a, true
		}
	}
	return ackEvent{}, false
}
