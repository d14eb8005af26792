package worker

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

// pullRequests are the pull requests of one tool's fetcher, which pull
// tasks from the tool's durable consumer over a subscription that lives as
// long as they do (jetstream's Consumer.Next
// subscribes and unsubscribes an inbox, and starts a goroutine, for every
// task). Each pull request asks for as many messages as the fetcher held
// free slots when it made it, and has its own reply subject under the
// subscription's wildcard. Several requests may be outstanding at once, so
// that a slot freed while others wait is asked for at once; the slots they
// hold are counted together (held): each task delivered takes
// one, and a request's end (its expiry, with the count of messages it did
// not get) gives the rest back. Requests are only abandoned (the fetcher
// stops or is preempted, a status it cannot count, or no answer well past
// the requests' expiry) by dropping the subscription with all of them, so
// that a task delivered to an abandoned request never waits in this
// process: it is redelivered after its ack wait, as with Consumer.Next.
// They are used by one goroutine.
type pullRequests struct {
	nc      *nats.Conn
	subject string // the consumer's next-message API subject
	base    string // the subscription's inbox prefix, with its final dot
	sub     *nats.Subscription
	msgs    chan *nats.Msg
	seq     uint64
	req     []byte // a pull request's payload, reused
	max     int    // the most slots held at once
	held    int    // slots held by the outstanding requests
}

// ackPrefix starts the reply subject of every delivered message.
const ackPrefix = "$JS.ACK."

// Status codes of pull responses.
const (
	statusControl  = "100"
	statusNoMsgs   = "404"
	statusTimeout  = "408"
	statusConflict = "409"
)

// newPullRequests returns the requests of a fetcher, holding at most max slots at once.
func newPullRequests(nc *nats.Conn, stream, consumer string, max int) *pullRequests {
	return &pullRequests{nc: nc, subject: "$JS.API.CONSUMER.MSG.NEXT." + stream + "." + consumer, max: max}
}

// abandon drops the subscription with every outstanding request and
// returns how many slots they held.
func (p *pullRequests) abandon() int {
	if p.sub != nil {
		_ = p.sub.Unsubscribe()
		p.sub = nil
	}
	n := p.held
	p.held = 0
	return n
}

// request asks for batch messages, one per slot the caller took for it,
// waiting at most expires for them to be stored. On error the caller
// still holds the slots.
func (p *pullRequests) request(batch int, expires time.Duration) error {
	if p.held+batch > p.max {
		return fmt.Errorf("natsjs: pull: %d slots held and %d more exceed %d", p.held, batch, p.max)
	}
	if p.sub == nil {
		p.base = p.nc.NewInbox() + "."
		// Room for every message due and a status per request (each holds
		// a slot at least): a full channel would drop messages (slow
		// consumer).
		p.msgs = make(chan *nats.Msg, 2*p.max+8)
		sub, err := p.nc.ChanSubscribe(p.base+"*", p.msgs)
		if err != nil {
			return err
		}
		p.sub = sub
	}
	p.seq++
	reply := p.base + strconv.FormatUint(p.seq, 36)
	p.req = append(p.req[:0], `{"batch":`...)
	p.req = strconv.AppendInt(p.req, int64(batch), 10)
	p.req = append(p.req, `,"expires":`...)
	p.req = strconv.AppendInt(p.req, expires.Nanoseconds(), 10)
	p.req = append(p.req, '}')
	if err := p.nc.PublishRequest(p.subject, reply, p.req); err != nil {
		return err
	}
	p.held += batch
	return nil
}

// errUncounted is wrapped by the error of a message the requests cannot
// count against its requests: the caller abandons them all.
var errUncounted = errors.New("natsjs: pull: message not counted")

// receive takes one message of the subscription: a task, which takes one
// of the slots held (the caller hands it on with that slot); or a status,
// where the end of a request gives back, as freed, the slots it held for
// messages that will not come. An error (a status other than a request's
// expiry, or a message it cannot count) means the requests can no longer
// be counted: the caller abandons them.
func (p *pullRequests) receive(m *nats.Msg) (task jetstream.Msg, freed int, err error) {
	status := ""
	if len(m.Data) == 0 && len(m.Header) > 0 && !strings.HasPrefix(m.Reply, ackPrefix) {
		// A status of the server, not a stored task (which may carry any
		// header, Status too, but is always delivered with an ack subject).
		status = m.Header.Get("Status")
	}
	switch status {
	case "":
		if p.held == 0 {
			return &taskMsg{m: m}, 0, fmt.Errorf("%w: a task beyond the slots asked for", errUncounted)
		}
		p.held--
		return &taskMsg{m: m}, 0, nil
	case statusControl:
		return nil, 0, nil
	case statusNoMsgs, statusTimeout:
		if !strings.HasPrefix(m.Subject, p.base) {
			return nil, 0, nil // not a request of this subscription
		}
		k, perr := strconv.Atoi(m.Header.Get("Nats-Pending-Messages"))
		if perr != nil || k < 0 || k > p.held {
			return nil, 0, fmt.Errorf("%w: status %s with pending messages %q", errUncounted, status, m.Header.Get("Nats-Pending-Messages"))
		}
		p.held -= k
		return nil, k, nil
	default:
		return nil, 0, fmt.Errorf("natsjs: pull: %s %s", status, m.Header.Get("Description"))
	}
}

// taskMsg is a pulled task as a [jetstream.Msg]. Its metadata is parsed
// once: the fetcher reads the backlog from it, and the runner the rest.
// The fetcher hands the message to the runner over a channel, so the two
// never read it at once.
type taskMsg struct {
	m     *nats.Msg
	md    *jetstream.MsgMetadata
	mdErr error
}

var _ jetstream.Msg = (*taskMsg)(nil)

func (p *taskMsg) Data() []byte         { return p.m.Data }
func (p *taskMsg) Headers() nats.Header { return p.m.Header }
func (p *taskMsg) Subject() string      { return p.m.Subject }
func (p *taskMsg) Reply() string        { return p.m.Reply }
func (p *taskMsg) Ack() error           { return p.m.Ack() }
func (p *taskMsg) Nak() error           { return p.m.Nak() }
func (p *taskMsg) InProgress() error    { return p.m.InProgress() }
func (p *taskMsg) Term() error          { return p.m.Term() }
func (p *taskMsg) DoubleAck(ctx context.Context) error {
	return p.m.AckSync(nats.Context(ctx))
}

func (p *taskMsg) NakWithDelay(delay time.Duration) error { return p.m.NakWithDelay(delay) }

// TermWithReason terminates the delivery, giving reason to the advisory.
func (p *taskMsg) TermWithReason(reason string) error {
	if p.m.Reply == "" {
		return errors.New("natsjs: message has no reply subject")
	}
	return p.m.Respond([]byte("+TERM " + strings.TrimSpace(reason)))
}

// Metadata returns the delivery's metadata, parsed from its reply subject
// on the first call.
func (p *taskMsg) Metadata() (*jetstream.MsgMetadata, error) {
	if p.md == nil && p.mdErr == nil {
		p.md, p.mdErr = p.parseMetadata()
	}
	return p.md, p.mdErr
}

func (p *taskMsg) parseMetadata() (*jetstream.MsgMetadata, error) {
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
