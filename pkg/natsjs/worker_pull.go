package natsjs

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// puller pulls tasks from a durable consumer for one tool's pulling
// goroutine, over a subscription that lives as long as it does (jetstream's
// Consumer.Next subscribes and unsubscribes an inbox, and starts a
// goroutine, for every task). Each pull request asks for as many messages
// as slots were free when it was made, and has its own reply
// subject under the subscription's wildcard, so that a status answering an abandoned request is told apart. A request is only
// abandoned (ctx ended, or no answer well past its expiry) by dropping the
// subscription with it, so that a task delivered to an abandoned request
// never waits in this process: it is redelivered after its ack wait, as
// with Consumer.Next.
type puller struct {
	nc      *nats.Conn
	subject string // the consumer's next-message API subject
	base    string // the subscription's inbox prefix
	sub     *nats.Subscription
	msgs    chan *nats.Msg
	seq     uint64
	req     []byte      // the pull request's payload, reused
	guard   *time.Timer // bounds the wait for an answer, reused
	max     int         // the largest batch asked for
}

// Status codes of pull responses.
const (
	statusControl  = "100"
	statusNoMsgs   = "404"
	statusTimeout  = "408"
	statusConflict = "409"
)

// newPuller returns a puller asking for at most max messages at once.
func newPuller(nc *nats.Conn, stream, consumer string, max int) *puller {
	return &puller{nc: nc, subject: "$JS.API.CONSUMER.MSG.NEXT." + stream + "." + consumer, max: max}
}

// close drops the subscription.
func (p *puller) close() {
	if p.sub != nil {
		_ = p.sub.Unsubscribe()
		p.sub = nil
	}
}

// pull asks for up to batch messages, waiting at most expires for them to
// be stored, and gives each to deliver as it arrives. It returns how many
// were delivered; the request is over when batch have come or the server
// ended it (err nats.ErrTimeout when it expired first), or when ctx ended
// (ctx's error), which drops the subscription so that no message still on
// its way waits in this process. A request is answered in full before the
// next is made, so every data message belongs to the current one.
func (p *puller) pull(ctx context.Context, batch int, expires time.Duration, deliver func(jetstream.Msg)) (int, error) {
	batch = max(1, min(batch, p.max))
	if p.sub == nil {
		p.base = p.nc.NewInbox()
		// Room for a whole batch and its status: a full channel would
		// drop messages (slow consumer).
		p.msgs = make(chan *nats.Msg, p.max+8)
		sub, err := p.nc.ChanSubscribe(p.base+".*", p.msgs)
		if err != nil {
			return 0, err
		}
		p.sub = sub
	}
	p.seq++
	reply := p.base + "." + strconv.FormatUint(p.seq, 36)
	p.req = append(p.req[:0], `{"batch":`...)
	p.req = strconv.AppendInt(p.req, int64(batch), 10)
	p.req = append(p.req, `,"expires":`...)
	p.req = strconv.AppendInt(p.req, expires.Nanoseconds(), 10)
	p.req = append(p.req, '}')
	if err := p.nc.PublishRequest(p.subject, reply, p.req); err != nil {
		p.close()
		return 0, err
	}
	if p.guard == nil {
		p.guard = time.NewTimer(expires + time.Second)
	} else {
		p.guard.Reset(expires + time.Second) // no stale tick after Reset (Go ≥ 1.23)
	}
	guard := p.guard
	defer guard.Stop()
	n := 0
	for {
		select {
		case m := <-p.msgs:
			status := ""
			if len(m.Data) == 0 && len(m.Header) > 0 {
				status = m.Header.Get("Status")
			}
			if status == "" {
				deliver(pulledMsg{m})
				if n++; n == batch {
					return n, nil
				}
				continue
			}
			if m.Subject != reply || status == statusControl {
				continue // an abandoned request's, or a heartbeat
			}
			switch status {
			case statusNoMsgs, statusTimeout:
				return n, nats.ErrTimeout
			default:
				return n, fmt.Errorf("natsjs: pull: %s %s", status, m.Header.Get("Description"))
			}
		case <-ctx.Done():
			p.close()
			return n, ctx.Err()
		case <-guard.C:
			p.close()
			return n, nats.ErrTimeout
		}
	}
}

// pulledMsg is a pulled task as a [jetstream.Msg].
type pulledMsg struct{ m *nats.Msg }

var _ jetstream.Msg = pulledMsg{}

func (p pulledMsg) Data() []byte         { return p.m.Data }
func (p pulledMsg) Headers() nats.Header { return p.m.Header }
func (p pulledMsg) Subject() string      { return p.m.Subject }
func (p pulledMsg) Reply() string        { return p.m.Reply }
func (p pulledMsg) Ack() error           { return p.m.Ack() }
func (p pulledMsg) Nak() error           { return p.m.Nak() }
func (p pulledMsg) InProgress() error    { return p.m.InProgress() }
func (p pulledMsg) Term() error          { return p.m.Term() }
func (p pulledMsg) DoubleAck(ctx context.Context) error {
	return p.m.AckSync(nats.Context(ctx))
}

func (p pulledMsg) NakWithDelay(delay time.Duration) error { return p.m.NakWithDelay(delay) }

// TermWithReason terminates the delivery, giving reason to the advisory.
func (p pulledMsg) TermWithReason(reason string) error {
	if p.m.Reply == "" {
		return errors.New("natsjs: message has no reply subject")
	}
	return p.m.Respond([]byte("+TERM " + strings.TrimSpace(reason)))
}

// Metadata parses the delivery's metadata from its reply subject.
func (p pulledMsg) Metadata() (*jetstream.MsgMetadata, error) {
	md, err := p.m.Metadata()
	if err != nil {
		return nil, err
	}
	return &jetstream.MsgMetadata{
		Sequence:     jetstream.SequencePair{Consumer: md.Sequence.Consumer, Stream: md.Sequence.Stream},
		NumDelivered: md.NumDelivered,
		NumPending:   md.NumPending,
		Timestamp:    md.Timestamp,
		Stream:       md.Stream,
		Consumer:     md.Consumer,
		Domain:       md.Domain,
	}, nil
}
