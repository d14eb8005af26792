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

// puller pulls tasks from a durable consumer for one tool's fetcher, over
// a subscription that lives as long as it does (jetstream's Consumer.Next
// subscribes and unsubscribes an inbox, and starts a goroutine, for every
// task). Each pull request asks for as many messages as the fetcher held
// free slots when it made it, and has its own reply subject under the
// subscription's wildcard. Several requests may be outstanding at once, so
// that a slot freed while others wait is asked for at once; the puller
// counts the slots they hold together (held): each task delivered takes
// one, and a request's end (its expiry, with the count of messages it did
// not get) gives the rest back. Requests are only abandoned (the fetcher
// stops or is preempted, a status it cannot count, or no answer well past
// the requests' expiry) by dropping the subscription with all of them, so
// that a task delivered to an abandoned request never waits in this
// process: it is redelivered after its ack wait, as with Consumer.Next.
// A puller is used by one goroutine.
type puller struct {
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

// newPuller returns a puller holding at most max slots at once.
func newPuller(nc *nats.Conn, stream, consumer string, max int) *puller {
	return &puller{nc: nc, subject: "$JS.API.CONSUMER.MSG.NEXT." + stream + "." + consumer, max: max}
}

// abandon drops the subscription with every outstanding request and
// returns how many slots they held.
func (p *puller) abandon() int {
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
func (p *puller) request(batch int, expires time.Duration) error {
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

// errUncounted is wrapped by the error of a message the puller cannot
// count against its requests: the caller abandons them all.
var errUncounted = errors.New("natsjs: pull: message not counted")

// receive takes one message of the subscription: a task, which takes one
// of the slots held (the caller hands it on with that slot); or a status,
// where the end of a request gives back, as freed, the slots it held for
// messages that will not come. An error (a status other than a request's
// expiry, or a message it cannot count) means the requests can no longer
// be counted: the caller abandons them.
func (p *puller) receive(m *nats.Msg) (task jetstream.Msg, freed int, err error) {
	status := ""
	if len(m.Data) == 0 && len(m.Header) > 0 && !strings.HasPrefix(m.Reply, ackPrefix) {
		// A status of the server, not a stored task (which may carry any
		// header, Status too, but is always delivered with an ack subject).
		status = m.Header.Get("Status")
	}
	switch status {
	case "":
		if p.held == 0 {
			return &pulledMsg{m: m}, 0, fmt.Errorf("%w: a task beyond the slots asked for", errUncounted)
		}
		p.held--
		return &pulledMsg{m: m}, 0, nil
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

// pulledMsg is a pulled task as a [jetstream.Msg]. Its metadata is parsed
// once: the fetcher reads the backlog from it, and the runner the rest.
// The fetcher hands the message to the runner over a channel, so the two
// never read it at once.
type pulledMsg struct {
	m     *nats.Msg
	md    *jetstream.MsgMetadata
	mdErr error
}

var _ jetstream.Msg = (*pulledMsg)(nil)

func (p *pulledMsg) Data() []byte         { return p.m.Data }
func (p *pulledMsg) Headers() nats.Header { return p.m.Header }
func (p *pulledMsg) Subject() string      { return p.m.Subject }
func (p *pulledMsg) Reply() string        { return p.m.Reply }
func (p *pulledMsg) Ack() error           { return p.m.Ack() }
func (p *pulledMsg) Nak() error           { return p.m.Nak() }
func (p *pulledMsg) InProgress() error    { return p.m.InProgress() }
func (p *pulledMsg) Term() error          { return p.m.Term() }
func (p *pulledMsg) DoubleAck(ctx context.Context) error {
	return p.m.AckSync(nats.Context(ctx))
}

func (p *pulledMsg) NakWithDelay(delay time.Duration) error { return p.m.NakWithDelay(delay) }

// TermWithReason terminates the delivery, giving reason to the advisory.
func (p *pulledMsg) TermWithReason(reason string) error {
	if p.m.Reply == "" {
		return errors.New("natsjs: message has no reply subject")
	}
	return p.m.Respond([]byte("+TERM " + strings.TrimSpace(reason)))
}

// Metadata returns the delivery's metadata, parsed from its reply subject
// on the first call.
func (p *pulledMsg) Metadata() (*jetstream.MsgMetadata, error) {
	if p.md == nil && p.mdErr == nil {
		p.md, p.mdErr = p.parseMetadata()
	}
	return p.md, p.mdErr
}

func (p *pulledMsg) parseMetadata() (*jetstream.MsgMetadata, error) {
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
