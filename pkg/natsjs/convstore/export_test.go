package convstore

import (
	"context"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/offload-dev/offload/pkg/natsjs/internal/direct"
)

// FailGets makes in's direct gets and batches of them on stream fail
// with the errors listed by call (counted from 1 on that stream: Collect
// reads the streams at once), such as the "no responders" of a cluster
// electing a leader, and returns how many reads were made so far on
// every stream.
func FailGets(in *Inbox, stream string, fail map[int]error) (calls func() int) {
	var mu sync.Mutex
	n, on := 0, 0
	count := func(s string) error {
		mu.Lock()
		defer mu.Unlock()
		n++
		if s != stream {
			return nil
		}
		on++
		return fail[on]
	}
	get, batch := in.get, in.batch
	in.get = func(ctx context.Context, nc *nats.Conn, s, subject string) (*direct.Msg, error) {
		if err := count(s); err != nil {
			return nil, err
		}
		return get(ctx, nc, s, subject)
	}
	in.batch = func(ctx context.Context, s, filter string, from uint64, size int) ([]*direct.Msg, bool, error) {
		if err := count(s); err != nil {
			return nil, false, err
		}
		return batch(ctx, s, filter, from, size)
	}
	return func() int {
		mu.Lock()
		defer mu.Unlock()
		return n
	}
}

// OnRead calls fn with the stream of each batch of direct gets in makes.
func OnRead(in *Inbox, fn func(stream string)) {
	batch := in.batch
	in.batch = func(ctx context.Context, s, filter string, from uint64, size int) ([]*direct.Msg, bool, error) {
		fn(s)
		return batch(ctx, s, filter, from, size)
	}
}

// SetBatchSize makes in ask for n messages per read.
func SetBatchSize(in *Inbox, n int) { in.batchSize = n }

// Holdings returns how many conversations s keeps what it knows of (the
// leases it holds) and how many history objects it remembers.
func Holdings(s *Store) (held, objects int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.held), len(s.objects)
}

// FailFirstGetAfter makes in's first read on stream wait until n reads
// on stream other have returned, then fail with err.
func FailFirstGetAfter(in *Inbox, stream string, err error, other string, n int) {
	var mu sync.Mutex
	cond := sync.NewCond(&mu)
	first, onOther := true, 0
	batch := in.batch
	in.batch = func(ctx context.Context, s, filter string, from uint64, size int) ([]*direct.Msg, bool, error) {
		mu.Lock()
		if s == stream && first {
			first = false
			for onOther < n {
				cond.Wait()
			}
			mu.Unlock()
			return nil, false, err
		}
		mu.Unlock()
		msgs, more, berr := batch(ctx, s, filter, from, size)
		if s == other {
			mu.Lock()
			onOther++
			cond.Broadcast()
			mu.Unlock()
		}
		return msgs, more, berr
	}
}

// SetRepairGrace sets how old an entry of the index of pending calls that
// no record holds must be for s.RepairIndex to remove it.
func SetRepairGrace(s *Store, d time.Duration) { s.repairGrace = d }

// LoseStatusMessages makes the server refuse s's messages of the index
// of statuses from now on (each publish's acknowledgement err), as a
// process killed between a status entry's write and its message's would
// leave the index: the entries are written all the same.
func LoseStatusMessages(s *Store, err error) {
	s.publishStatus = func(m *nats.Msg, _ ...jetstream.PublishOpt) (jetstream.PubAckFuture, error) {
		f := &refusedAck{msg: m, ok: make(chan *jetstream.PubAck), err: make(chan error, 1)}
		f.err <- err
		return f, nil
	}
}

// refusedAck is the acknowledgement of a publish the server refused.
type refusedAck struct {
	msg *nats.Msg
	ok  chan *jetstream.PubAck
	err chan error
}

func (f *refusedAck) Ok() <-chan *jetstream.PubAck { return f.ok }
func (f *refusedAck) Err() <-chan error            { return f.err }
func (f *refusedAck) Msg() *nats.Msg               { return f.msg }

// HoldRemovals makes s's removals of entries of the index of pending
// calls, off its saves' path, wait until release is called; release lets
// every one go from then on. waits receives a value each time a save
// waits for a removal under way.
func HoldRemovals(s *Store) (release func(), waits <-chan struct{}) {
	gate, w := make(chan struct{}), make(chan struct{}, 16)
	s.mu.Lock()
	s.removals = gate
	s.waitsRemoval = func() { w <- struct{}{} }
	s.mu.Unlock()
	var once sync.Once
	return func() { once.Do(func() { close(gate) }) }, w
}
