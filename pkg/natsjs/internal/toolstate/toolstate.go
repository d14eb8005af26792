// Package toolstate reads and changes a tool's fleet control state
// (limits.State, the key <tool>.state of the bucket <prefix>_limits) and
// the tasks that wait in its queue (the keys <tool>.<task>.<attempt> of
// the bucket <prefix>_queue), by direct gets and compare-and-set of those
// keys only: no bucket bound, no stream info read, so that a worker's
// user needs grants on its own tools' keys alone (SPEC §19). The worker
// and the operators' commands share it.
package toolstate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/offload-dev/offload/pkg/limits"
	"github.com/offload-dev/offload/pkg/natsjs"
	"github.com/offload-dev/offload/pkg/natsjs/internal/direct"
)

// ErrNoChange is returned by an update's function to leave the state as
// it is: nothing is written.
var ErrNoChange = errors.New("toolstate: no change")

// maxConflicts bounds how often an update is tried again after another
// writer changed the state first.
const maxConflicts = 50

// Store is the fleet control state of a prefix's tools and their queued
// tasks.
type Store struct {
	limits direct.Keys
	queue  direct.Keys

	mu     sync.Mutex
	groups map[string]*group // by tool: the updates waiting to be stored together
}

// New returns the store of names' buckets, on nc (reads) and js (writes).
func New(js jetstream.JetStream, nc *nats.Conn, names natsjs.Names) *Store {
	return &Store{
		limits: direct.Keys{JS: js, NC: nc, Stream: names.LimitsStream, Bucket: names.LimitsBucket},
		queue:  direct.Keys{JS: js, NC: nc, Stream: names.QueueStream, Bucket: names.QueueBucket},
	}
}

// Load returns tool's state and its revision: an empty state and 0 when it
// has none.
func (s *Store) Load(ctx context.Context, toolName string) (*limits.State, uint64, error) {
	data, rev, err := s.limits.Get(ctx, natsjs.LimitsKey(toolName))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return &limits.State{}, 0, nil
	}
	if err != nil {
		return nil, 0, fmt.Errorf("natsjs: the state of tool %s: %w", toolName, err)
	}
	var st limits.State
	if err := json.Unmarshal(data, &st); err != nil {
		// A state no release of this module wrote: it is replaced.
		return &limits.State{}, rev, nil //nolint:nilerr // the state is rebuilt, the calls that waited are found again by their deliveries
	}
	return &st, rev, nil
}

// Update applies fn to tool's state and stores the result with
// compare-and-set, applying fn again to the state another writer stored
// first; it returns the state stored. fn returning ErrNoChange stores
// nothing (Update returns the state read and no error); another error of
// fn is returned as it is, and what fn changed is dropped.
//
// The updates of one tool that callers of the same Store ask for at once
// are stored together (a group commit): one of them reads the state,
// applies every fn waiting, each to the state the one before it left, and
// stores the result by one compare-and-set, so that a worker's runners do
// not contend with one another for the tool's one value, and a flood of
// calls is parked a batch a write rather than a call a write. fn may be
// applied on another goroutine than its caller's, which waits for it;
// and, as with any compare-and-set, more than once: it sets what it
// reports afresh each time. The state returned is the caller's alone to
// read; it must not be changed.
func (s *Store) Update(ctx context.Context, toolName string, fn func(*limits.State) error) (*limits.State, error) {
	u := &update{fn: fn, done: make(chan struct{}), lead: make(chan struct{})}
	s.mu.Lock()
	g := s.groups[toolName]
	if g == nil {
		g = &group{}
		if s.groups == nil {
			s.groups = map[string]*group{}
		}
		s.groups[toolName] = g
	}
	g.waiting = append(g.waiting, u)
	leading := !g.running
	g.running = true
	s.mu.Unlock()
	if !leading {
		select {
		case <-u.done:
			return u.st, u.err
		case <-u.lead: // the one before handed over: this caller commits
		}
	}
	s.commit(ctx, toolName, g)
	<-u.done
	return u.st, u.err
}

// update is one caller's change of a tool's state, waiting in its group.
type update struct {
	fn   func(*limits.State) error
	st   *limits.State
	err  error
	done chan struct{} // closed once st and err are set
	lead chan struct{} // closed when this caller is to commit its group
}

// group are the updates of one tool that wait to be stored, and whether
// one caller commits them (running): at most one does at a time.
type group struct {
	waiting []*update
	running bool
}

// commit stores the updates waiting in g, and more that arrive while it
// retries after a conflict, then hands the commit of those arriving
// meanwhile to the first of them (or ends the group's run).
func (s *Store) commit(ctx context.Context, toolName string, g *group) {
	var batch []*update
	take := func() {
		s.mu.Lock()
		batch = append(batch, g.waiting...)
		g.waiting = nil
		s.mu.Unlock()
	}
	take()
	err := s.store(ctx, toolName, &batch, take)
	for _, u := range batch {
		if err != nil {
			u.st, u.err = nil, err
		}
		close(u.done)
	}
	s.mu.Lock()
	if len(g.waiting) > 0 {
		close(g.waiting[0].lead)
	} else {
		g.running = false
	}
	s.mu.Unlock()
}

// store applies the updates of *batch to tool's state and stores the
// result by compare-and-set, taking more updates (take, which appends to
// *batch) before each try after the first; each update's st and err are
// set, err nil, on success.
func (s *Store) store(ctx context.Context, toolName string, batch *[]*update, take func()) error {
	key := natsjs.LimitsKey(toolName)
	for conflicts := 0; ; conflicts++ {
		if conflicts > 0 {
			take()
		}
		cur, rev, err := s.Load(ctx, toolName)
		if err != nil {
			return err
		}
		changed := false
		for _, u := range *batch {
			next := cur.Clone()
			switch err := u.fn(next); {
			case err == nil:
				cur, changed = next, true
				u.st, u.err = next, nil
			case errors.Is(err, ErrNoChange):
				u.st, u.err = cur, nil
			default:
				u.st, u.err = cur, err
			}
		}
		if !changed {
			return nil
		}
		data, err := json.Marshal(cur)
		if err != nil {
			return fmt.Errorf("natsjs: encode the state of tool %s: %w", toolName, err)
		}
		_, err = s.limits.Update(ctx, key, data, rev)
		if err == nil {
			return nil
		}
		if !errors.Is(err, jetstream.ErrKeyRevisionMismatch) || conflicts >= maxConflicts {
			return fmt.Errorf("natsjs: store the state of tool %s: %w", toolName, err)
		}
		// Another replica wrote first: read again, after a pause that
		// keeps the writers from colliding in step.
		t := time.NewTimer(time.Duration(rand.Int64N(int64(time.Millisecond) << min(conflicts, 4)))) //nolint:gosec // G404: jitter, not a secret
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		}
	}
}

// PutTask stores a task that waits in tool's queue, as delivered (its
// data and headers); an attempt stored already is kept as it is.
func (s *Store) PutTask(ctx context.Context, toolName, task string, attempt int, data []byte, header nats.Header) error {
	m := nats.NewMsg("")
	for k, v := range header {
		m.Header[k] = v
	}
	m.Data = data
	_, err := s.queue.CreateMsg(ctx, natsjs.QueueKey(toolName, task, attempt), m)
	if err != nil && !errors.Is(err, jetstream.ErrKeyExists) {
		return fmt.Errorf("natsjs: store the queued task %s of %s: %w", task, toolName, err)
	}
	return nil
}

// GetTask returns a task of tool's queue as stored; nil when none is.
func (s *Store) GetTask(ctx context.Context, toolName, task string, attempt int) (*direct.Msg, error) {
	m, err := s.queue.GetMsg(ctx, natsjs.QueueKey(toolName, task, attempt))
	if err != nil {
		return nil, fmt.Errorf("natsjs: read the queued task %s of %s: %w", task, toolName, err)
	}
	return m, nil
}

// DeleteTask deletes a task of tool's queue.
func (s *Store) DeleteTask(ctx context.Context, toolName, task string, attempt int) error {
	if _, err := s.queue.Delete(ctx, natsjs.QueueKey(toolName, task, attempt), 0); err != nil {
		return fmt.Errorf("natsjs: delete the queued task %s of %s: %w", task, toolName, err)
	}
	return nil
}
