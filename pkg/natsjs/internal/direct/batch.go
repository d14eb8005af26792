package direct

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
)

// Batches of direct gets: up to BatchSize messages, and at most
// batchBytes of them (the server stops a batch once past it, having sent
// at least one message), per request.
const (
	// BatchSize is how many messages a batch asks for, unless told.
	BatchSize  = 64
	batchBytes = 4 << 20
)

// numPendingHeader is the end-of-batch status's count of the messages on
// the filter past the batch.
const numPendingHeader = "Nats-Num-Pending"

// Batches reads batches of direct gets on one connection. The replies,
// several per request, come on one wildcard subscription of the
// connection's inbox prefix, made at the first batch and kept as long as
// the connection (a subscription per request costs the server more than
// the request itself: ten times a single get's time, measured), each
// request a token of its own under it: make one Batches per connection.
// The zero value is not ready: [NewBatches].
type Batches struct {
	nc *nats.Conn

	mu      sync.Mutex
	prefix  string // the subscription's subjects, prefix.<token>; "" until made
	waiting map[string]chan *nats.Msg
	next    uint64 // the last token given
}

// NewBatches returns the batches of direct gets of nc.
func NewBatches(nc *nats.Conn) *Batches { return &Batches{nc: nc} }

// open returns a reply subject and the channel its replies arrive on (at
// most n without loss; more are dropped, and the request waits in vain
// for its end), and the function that stops routing them.
func (b *Batches) open(n int) (string, <-chan *nats.Msg, func(), error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.prefix == "" {
		prefix := b.nc.NewInbox()
		if _, err := b.nc.Subscribe(prefix+".*", b.route); err != nil {
			return "", nil, nil, err
		}
		b.prefix, b.waiting = prefix, map[string]chan *nats.Msg{}
	}
	b.next++
	token := strconv.FormatUint(b.next, 36)
	ch := make(chan *nats.Msg, n)
	b.waiting[token] = ch
	return b.prefix + "." + token, ch, func() {
		b.mu.Lock()
		delete(b.waiting, token)
		b.mu.Unlock()
	}, nil
}

// route passes a reply to its request's channel, without waiting.
func (b *Batches) route(m *nats.Msg) {
	b.mu.Lock()
	ch := b.waiting[m.Subject[strings.LastIndexByte(m.Subject, '.')+1:]]
	b.mu.Unlock()
	if ch != nil {
		select {
		case ch <- m:
		default:
		}
	}
}

// Next asks stream's direct get API for the messages on filter
// (wildcards allowed) at or after sequence from, in one request answered
// by up to n messages and an end-of-batch status (no consumer created):
// the messages, in stream order, and whether more were stored on filter
// past the last of them when the batch ended. Those of a batch cut short
// by an error are returned with it.
func (b *Batches) Next(ctx context.Context, stream, filter string, from uint64, n int) ([]*Msg, bool, error) {
	return b.get(ctx, stream, filter, batchRequest{Seq: from, NextFor: filter, Batch: n, MaxBytes: batchBytes})
}

// Count returns how many messages are stored on filter (wildcards
// allowed) in stream: a batch of one from the first, whose end-of-batch
// status counts those past it (the server keeps the count by subject: no
// message but the first is read).
func (b *Batches) Count(ctx context.Context, stream, filter string) (uint64, error) {
	req, _ := json.Marshal(batchRequest{Seq: 1, NextFor: filter, Batch: 1, MaxBytes: batchBytes})
	reply, replies, stop, err := b.open(2)
	if err != nil {
		return 0, fmt.Errorf("natsjs: count %s: %w", filter, err)
	}
	defer stop()
	if err := b.nc.PublishRequest("$JS.API.DIRECT.GET."+stream, reply, req); err != nil {
		return 0, fmt.Errorf("natsjs: count %s: %w", filter, err)
	}
	var n uint64
	for {
		var m *nats.Msg
		select {
		case m = <-replies:
		case <-ctx.Done():
			return 0, fmt.Errorf("natsjs: count %s: %w", filter, ctx.Err())
		}
		switch m.Header.Get("Status") {
		case "":
			n++
		case "404": // none at all
			return 0, nil
		case "204": // the end of the batch
			pending, _ := strconv.ParseUint(m.Header.Get(numPendingHeader), 10, 64)
			return n + pending, nil
		default:
			return 0, statusError(m, filter)
		}
	}
}

// Since is [Batches.Next] from the first message on filter stored at or
// after time since (the server's clock) rather than from a sequence.
func (b *Batches) Since(ctx context.Context, stream, filter string, since time.Time, n int) ([]*Msg, bool, error) {
	return b.get(ctx, stream, filter, batchRequest{StartTime: &since, NextFor: filter, Batch: n, MaxBytes: batchBytes})
}

// batchRequest is a batched direct get's request.
type batchRequest struct {
	Seq       uint64     `json:"seq,omitempty"`
	StartTime *time.Time `json:"start_time,omitempty"`
	NextFor   string     `json:"next_by_subj"`
	Batch     int        `json:"batch"`
	MaxBytes  int        `json:"max_bytes"`
}

// get makes the batched direct get r of stream.
func (b *Batches) get(ctx context.Context, stream, filter string, r batchRequest) ([]*Msg, bool, error) {
	n := r.Batch
	req, _ := json.Marshal(r)
	reply, replies, stop, err := b.open(n + 1)
	if err != nil {
		return nil, false, fmt.Errorf("natsjs: look %s up: %w", filter, err)
	}
	defer stop()
	if err := b.nc.PublishRequest("$JS.API.DIRECT.GET."+stream, reply, req); err != nil {
		return nil, false, fmt.Errorf("natsjs: look %s up: %w", filter, err)
	}
	var out []*Msg
	for {
		var m *nats.Msg
		select {
		case m = <-replies:
		case <-ctx.Done():
			return out, false, fmt.Errorf("natsjs: look %s up: %w", filter, ctx.Err())
		}
		switch m.Header.Get("Status") {
		case "":
			dm, err := Parse(m, filter)
			if err != nil {
				return out, false, err
			}
			out = append(out, dm)
		case "404": // none at all
			return out, false, nil
		case "204": // the end of the batch
			pending, _ := strconv.ParseUint(m.Header.Get(numPendingHeader), 10, 64)
			return out, pending > 0, nil
		default:
			return out, false, statusError(m, filter)
		}
	}
}
