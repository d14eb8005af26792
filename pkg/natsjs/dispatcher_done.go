package natsjs

import (
	"encoding/binary"
	"time"

	"github.com/offload-dev/offload/pkg/protocol"
)

// This file holds the dispatcher's memory of finished tasks: compact, so
// that a busy agent does not grow with every call it made (at most a few
// dozen bytes per call remembered, for DispatcherConfig.Remember).

// doneGens is how many generations the remembered tasks are split into: a
// task is remembered between Remember and Remember·(1+1/doneGens).
const doneGens = 8

// doneSet remembers finished, cancelled and detached tasks, in generations
// of Remember/doneGens each, so that forgetting the old ones drops a whole
// generation at once (no per-task time or queue). A task is keyed by the
// low 64 bits of its ULID (random bits, unique in practice within the
// window): the set only classifies results that no call waits for any
// more (duplicate, late, detached, unknown), which are never delivered
// whatever the class, so a collision could only change a refusal's
// reason. Each entry holds its conversation as an index into a
// [convTable] and its kind.
type doneSet struct {
	keep, span time.Duration
	gens       []doneGen // oldest first
}

type doneGen struct {
	start time.Time
	m     map[uint64]uint32 // task key → conversation index << 2 | kind
}

// doneKey returns a task's key, or false when task is not a ULID (such a
// task can neither be dispatched nor remembered).
func doneKey(task string) (uint64, bool) {
	id, err := protocol.ParseID(task)
	if err != nil {
		return 0, false
	}
	return binary.BigEndian.Uint64(id[8:]), true
}

func newDoneSet(keep time.Duration) *doneSet {
	return &doneSet{keep: keep, span: max(keep/doneGens, time.Millisecond)}
}

// get returns a remembered task's conversation index and kind.
func (s *doneSet) get(key uint64) (conv uint32, kind doneKind, ok bool) {
	for i := len(s.gens) - 1; i >= 0; i-- {
		if v, found := s.gens[i].m[key]; found {
			return v >> 2, doneKind(v & 3), true
		}
	}
	return 0, 0, false
}

// del forgets a task and returns its conversation index.
func (s *doneSet) del(key uint64) (conv uint32, ok bool) {
	for i := len(s.gens) - 1; i >= 0; i-- {
		if v, found := s.gens[i].m[key]; found {
			delete(s.gens[i].m, key)
			return v >> 2, true
		}
	}
	return 0, false
}

// put remembers a task (not remembered already) at now.
func (s *doneSet) put(now time.Time, key uint64, conv uint32, kind doneKind) {
	if n := len(s.gens); n == 0 || now.Sub(s.gens[n-1].start) >= s.span {
		s.gens = append(s.gens, doneGen{start: now, m: make(map[uint64]uint32)})
	}
	s.gens[len(s.gens)-1].m[key] = conv<<2 | uint32(kind)
}

// expire forgets the generations whose every task was remembered more than
// keep ago, calling release with each forgotten task's conversation.
func (s *doneSet) expire(now time.Time, release func(conv uint32)) {
	n := 0
	for n < len(s.gens)-1 && now.Sub(s.gens[n+1].start) > s.keep {
		for _, v := range s.gens[n].m {
			release(v >> 2)
		}
		n++
	}
	if n > 0 {
		s.gens = append(s.gens[:0], s.gens[n:]...)
		clear(s.gens[len(s.gens):cap(s.gens)])
	}
}

// len returns how many tasks are remembered.
func (s *doneSet) len() int {
	n := 0
	for _, g := range s.gens {
		n += len(g.m)
	}
	return n
}

// convTable counts, per conversation, the calls pending and the tasks
// remembered, and gives each conversation counted a small index (reused
// once its count drops to zero), so that remembered tasks need not hold
// its ID.
type convTable struct {
	byName map[string]uint32
	slots  []convSlot
	free   []uint32
}

type convSlot struct {
	name string
	n    int
}

func newConvTable() *convTable { return &convTable{byName: make(map[string]uint32)} }

// hold counts one more call or task of conv and returns its index.
func (t *convTable) hold(conv string) uint32 {
	if i, ok := t.byName[conv]; ok {
		t.slots[i].n++
		return i
	}
	var i uint32
	if n := len(t.free); n > 0 {
		i = t.free[n-1]
		t.free = t.free[:n-1]
	} else {
		i = uint32(len(t.slots))
		t.slots = append(t.slots, convSlot{})
	}
	t.slots[i] = convSlot{name: conv, n: 1}
	t.byName[conv] = i
	return i
}

// index returns the index of a counted conversation.
func (t *convTable) index(conv string) (uint32, bool) {
	i, ok := t.byName[conv]
	return i, ok
}

// name returns the conversation of an index.
func (t *convTable) name(i uint32) string { return t.slots[i].name }

// known reports whether conv has calls pending or tasks remembered.
func (t *convTable) known(conv string) bool {
	_, ok := t.byName[conv]
	return ok
}

// release counts one call or task of the conversation at index i less.
func (t *convTable) release(i uint32) {
	s := &t.slots[i]
	if s.n--; s.n > 0 {
		return
	}
	delete(t.byName, s.name)
	*s = convSlot{}
	t.free = append(t.free, i)
}

// releaseName is release by conversation ID.
func (t *convTable) releaseName(conv string) {
	if i, ok := t.byName[conv]; ok {
		t.release(i)
	}
}

// len returns how many conversations are counted.
func (t *convTable) len() int { return len(t.byName) }
