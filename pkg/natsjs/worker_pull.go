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

// puller pulls one task at a time from a durable consumer for one fetcher,
// over a subscription that lives as long as the fetcher (jetstream's
// Consumer.Next subscribes and unsubscribes an inbox, and starts a
// goroutine, for every task). Each pull request asks for one message and
// has its own reply subject under the subscription's wildcard, so that a
// status answering an abandoned request is told apart. A request is only
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
}

// Status codes of pull responses.
const (
	statusControl  = "100"
	statusNoMsgs   = "404"
	statusTimeout  = "408"
	statusConflict = "409"
)

func newPuller(nc *nats.Conn, stream, consumer string) *puller {
	return &puller{nc: nc, subject: "$JS.API.CONSUMER.MSG.NEXT." + stream + "." + consumer}
}

// close drops the subscription.
func (p *puller) close() {
	if p.sub != nil {
		_ = p.sub.Unsubscribe()
		p.sub = nil
	}
}

// next pulls one message, waiting at most expires for one to be stored. It
// returns nats.ErrTimeout when none came, ctx's error when ctx ended first.
func (p *puller) next(ctx context.Context, expires time.Duration) (jetstream.Msg, error) {
	if p.sub == nil {
		p.base = p.nc.NewInbox()
		p.msgs = make(chan *nats.Msg, 8)
		sub, err := p.nc.ChanSubscribe(p.base+".*", p.msgs)
		if err != nil {
			return nil, err
		}
		p.sub = sub
	}
	p.seq++
	reply := p.base + "." + strconv.FormatUint(p.seq, 36)
	p.req = append(p.req[:0], `{"batch":1,"expires":`...)
	p.req = strconv.AppendInt(p.req, expires.Nanoseconds(), 10)
	p.req = append(p.req, '}')
	if err := p.nc.PublishRequest(p.subject, reply, p.req); err != nil {
		p.close()
		return nil, err
	}
	if p.guard == nil {
		p.guard = time.NewTimer(expires + time.Second)
	} else {
		p.guard.Reset(expires + time.Second) // no stale tick after Reset (Go ≥ 1.23)
	}
	guard := p.guard
	defer guard.Stop()
	for {
		select {
		case m := <-p.msgs:
			status := ""
			if len(m.Data) == 0 && len(m.Header) > 0 {
				status = m.Header.Get("Status")
			}
			if status == "" {
				return pulledMsg{m}, nil
			}
			if m.Subject != reply || status == statusControl {
				continue // an abandoned request's, or a heartbeat
			}
			switch status {
			case statusNoMsgs, statusTimeout:
				return nil, nats.ErrTimeout
			default:
				return nil, fmt.Errorf("natsjs: pull: %s %s", status, m.Header.Get("Description"))
			}
		case <-ctx.Done():
			p.close()
			return nil, ctx.Err()
		case <-guard.C:
			p.close()
			return nil, nats.ErrTimeout
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
