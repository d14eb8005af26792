package convstore

import (
	"context"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// readAhead replays the messages of a stream on a filter past a
// checkpoint ([Inbox.replay]) on a goroutine of its own, a message ahead
// of its reader: [Inbox.Collect] reads the answers and results streams
// while it considers the decisions, so that a wake waits for the three
// streams' reads at once rather than one after the other, and still
// considers their messages in order (decisions, answers, then results).
// Every message read is handed over: the reader takes them all (each or
// drain).
type readAhead struct {
	msgs chan aheadMsg
	done chan struct{}
	last uint64 // set before done is closed
	err  error
}

// aheadMsg is a message read ahead: what replay passes on.
type aheadMsg struct {
	task, toolName string
	data           []byte
	meta           *jetstream.MsgMetadata
	h              nats.Header
}

// readAhead starts replaying stream on filter past sequence after; the
// caller takes its messages with each, or drains it.
func (in *Inbox) readAhead(ctx context.Context, stream, filter string, after uint64) *readAhead {
	a := &readAhead{msgs: make(chan aheadMsg, 1), done: make(chan struct{})}
	go func() {
		defer close(a.done)
		defer close(a.msgs)
		a.last, a.err = in.replay(ctx, stream, filter, after, func(task, toolName string, data []byte, meta *jetstream.MsgMetadata, h nats.Header) {
			a.msgs <- aheadMsg{task: task, toolName: toolName, data: data, meta: meta, h: h}
		})
	}()
	return a
}

// each passes every message read to fn, in order, and returns the last
// sequence read and the replay's error.
func (a *readAhead) each(fn func(task, toolName string, data []byte, meta *jetstream.MsgMetadata, h nats.Header)) (uint64, error) {
	for m := range a.msgs {
		fn(m.task, m.toolName, m.data, m.meta, m.h)
	}
	<-a.done
	return a.last, a.err
}

// drain discards what is left to read and waits for the replay's end
// (cancel its context first to end it early).
func (a *readAhead) drain() {
	for range a.msgs {
	}
	<-a.done
}
