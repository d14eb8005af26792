package conversation

import (
	"context"
	"slices"
	"sync"
	"time"
)

// Memory is a [Store] in this process's memory: for tests, and for
// programs whose conversations need not outlive them. The zero value is
// not usable; call [NewMemory].
type Memory struct {
	// ClaimWait is how long Claim waits for another holder to release a
	// conversation before it fails. Defaults to LeaseTTL.
	ClaimWait time.Duration

	mu       sync.Mutex
	states   map[string]memEntry
	leases   map[string]*memLease
	released chan struct{} // closed and replaced whenever a lease is released
}

type memEntry struct {
	state []byte
	rev   Revision
}

// NewMemory returns an empty in-memory store.
func NewMemory() *Memory {
	return &Memory{states: map[string]memEntry{}, leases: map[string]*memLease{}, released: make(chan struct{})}
}

var _ Store = (*Memory)(nil)

// Load implements [Store].
func (m *Memory) Load(_ context.Context, id string) (*State, Revision, error) {
	m.mu.Lock()
	e, ok := m.states[id]
	m.mu.Unlock()
	if !ok {
		return nil, 0, ErrNotFound
	}
	st, err := decodeState(e.state)
	if err != nil {
		return nil, 0, err
	}
	return st, e.rev, nil
}

// Save implements [Store].
func (m *Memory) Save(_ context.Context, st *State, prev Revision) (Revision, error) {
	data, err := encodeState(st)
	if err != nil {
		return 0, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.states[st.ID].rev != prev {
		return 0, ErrConflict
	}
	rev := prev + 1
	m.states[st.ID] = memEntry{state: data, rev: rev}
	return rev, nil
}

// List implements [Store].
func (m *Memory) List(context.Context) ([]string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	ids := make([]string, 0, len(m.states))
	for id := range m.states {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids, nil
}

// Claim implements [Store]. Leases of a Memory store are never lost.
func (m *Memory) Claim(ctx context.Context, id, holder string) (Lease, error) {
	wait := m.ClaimWait
	if wait <= 0 {
		wait = LeaseTTL
	}
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for {
		m.mu.Lock()
		cur := m.leases[id]
		if cur == nil {
			l := &memLease{m: m, id: id, holder: holder, lost: make(chan struct{})}
			m.leases[id] = l
			m.mu.Unlock()
			return l, nil
		}
		released := m.released
		m.mu.Unlock()
		select {
		case <-released:
		case <-timer.C:
			return nil, &ClaimedError{ID: id, Holder: cur.holder, Until: time.Now().Add(LeaseTTL)}
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

type memLease struct {
	m      *Memory
	id     string
	holder string
	lost   chan struct{}
	once   sync.Once
}

func (l *memLease) Lost() <-chan struct{} { return l.lost }

func (l *memLease) Release(context.Context) error {
	l.once.Do(func() {
		m := l.m
		m.mu.Lock()
		if m.leases[l.id] == l {
			delete(m.leases, l.id)
		}
		close(m.released)
		m.released = make(chan struct{})
		m.mu.Unlock()
	})
	return nil
}
