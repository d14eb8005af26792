// Package taskmem is a dispatcher's memory of finished tasks, which tells
// what a result no call waits for is: a duplicate, late, for the wrong
// conversation, a cancellation confirmed, a detached task's, unknown, or
// another process's. Such a result is never delivered, whatever it is: the
// class only picks the refusal's reason (or a Debug log), so the memory
// may trade precision for a bounded size.
//
// The memory is bounded by count as well as by time, so that the process
// stays flat however fast it makes calls:
//
//   - the exact set remembers the last [DefaultLimit] finished and cancelled
//     tasks, for the window or until the count evicts them (about 1.7 MiB
//     when full);
//   - detached tasks are remembered exactly for the window, never evicted by
//     the count (a resume in this process re-attaches them; they are
//     bounded by the calls pending at a pause);
//   - a task that has fallen out of the exact set is classified by the
//     time in its ULID and its conversation's activity (see
//     [Memory.Classify]).
//
// The window is the dispatcher's DedupWindow (natsjs/remote): how long a
// finished task is remembered.
package taskmem

import (
	"encoding/binary"
	"hash/maphash"
	"time"

	"github.com/offload-dev/offload/pkg/metrics"
	"github.com/offload-dev/offload/pkg/protocol"
)

// DefaultLimit is the most finished and cancelled tasks the dispatcher
// remembers exactly: at ~27 bytes per entry the exact set stays under
// 2 MiB (TestTaskMemoryBounded). At 5 000 calls/s it covers the last
// ~13 s; within the window older tasks are still refused, by the fallback
// rule of [Memory.Classify].
const DefaultLimit = 1 << 16

// generations is how many generations the remembered tasks are split into,
// by time (window/generations each) and by count (about limit/generations), so
// that forgetting the old ones drops a whole generation at once (no
// per-task time or queue): a task is remembered between the window and
// window·(1+1/generations), unless evicted earlier by the count.
const generations = 8

// Kind is what became of a task no call waits for any more.
type Kind uint32

const (
	// Answered is a task whose result came: another one is a duplicate.
	Answered Kind = iota
	// Cancelled is a task that was cancelled: a result after it is late.
	Cancelled
	// Detached is a task its call stopped waiting for, which runs on: its
	// result is the conversation store's.
	Detached
)

// entry is a remembered task's value: a 30-bit hash of its
// conversation (seeded per process; no index into a table of
// conversations, so that an entry holds nothing alive) and its kind in the
// low two bits. Two conversations with the same hash could only turn a
// wrong_conversation refusal into another refusal.
type entry uint32

func (e entry) kind() Kind { return Kind(e & 3) }

// genSet remembers tasks in generations, oldest first. A task is keyed by
// the low 64 bits of its ULID (random bits, unique in practice within the
// window); a collision could only change a refusal's reason.
type genSet struct {
	keep, span time.Duration
	limit      int // most entries; 0: bounded by time only
	genCap     int // most entries per generation; 0: no limit
	n          int // entries in all generations
	gens       []generation
	// evicted is the latest time a task was recorded among the
	// generations dropped for the count limit: every task finished after
	// it is still in the set (or expired by time).
	evicted time.Time
}

type generation struct {
	start, last time.Time // first and last put
	m           map[uint64]entry
}

// keyOf returns a task's key, or false when task is not a ULID (such a
// task can neither be dispatched nor remembered).
func keyOf(task string) (uint64, bool) {
	id, err := protocol.ParseID(task)
	if err != nil {
		return 0, false
	}
	return binary.BigEndian.Uint64(id[8:]), true
}

// newGenSet returns a set that remembers tasks for keep, and at most
// limit of them (0: no limit by count).
func newGenSet(keep time.Duration, limit int) *genSet {
	s := &genSet{keep: keep, span: max(keep/generations, time.Millisecond), limit: limit}
	if limit > 0 {
		// 7/8 of the share of a generation: a Go map grows (doubles)
		// past 7/8 full, so a full generation sized for it by put's
		// hint (a power of two) wastes no slot.
		s.genCap = max(limit/generations*7/8, 1)
	}
	return s
}

// get returns a remembered task's entry.
func (s *genSet) get(key uint64) (entry, bool) {
	for i := len(s.gens) - 1; i >= 0; i-- {
		if e, ok := s.gens[i].m[key]; ok {
			return e, true
		}
	}
	return 0, false
}

// del forgets a task; it reports whether it was remembered.
func (s *genSet) del(key uint64) bool {
	for i := len(s.gens) - 1; i >= 0; i-- {
		if _, ok := s.gens[i].m[key]; ok {
			delete(s.gens[i].m, key)
			s.n--
			return true
		}
	}
	return false
}

// put remembers a task (not remembered already) at now, forgetting the
// oldest generations when the set holds more than its limit.
func (s *genSet) put(now time.Time, key uint64, e entry) {
	n := len(s.gens)
	if n == 0 || now.Sub(s.gens[n-1].start) >= s.span || (s.genCap > 0 && len(s.gens[n-1].m) >= s.genCap) {
		hint := 0
		if n > 0 { // the rate is likely the same as the last generation's
			hint = len(s.gens[n-1].m)
		}
		s.gens = append(s.gens, generation{start: now, m: make(map[uint64]entry, hint)})
	}
	g := &s.gens[len(s.gens)-1]
	g.m[key] = e
	g.last = now
	s.n++
	for s.limit > 0 && s.n > s.limit && len(s.gens) > 1 {
		if g := s.gens[0]; g.last.After(s.evicted) {
			s.evicted = g.last
		}
		s.drop(1)
	}
}

// drop forgets the k oldest generations.
func (s *genSet) drop(k int) {
	for _, g := range s.gens[:k] {
		s.n -= len(g.m)
	}
	s.gens = append(s.gens[:0], s.gens[k:]...)
	clear(s.gens[len(s.gens):cap(s.gens)])
}

// expire forgets the generations whose every task was remembered more than
// keep ago.
func (s *genSet) expire(now time.Time) {
	k := 0
	for k < len(s.gens) && now.Sub(s.gens[k].last) > s.keep {
		k++
	}
	if k > 0 {
		s.drop(k)
	}
}

// len returns how many tasks are remembered.
func (s *genSet) len() int { return s.n }

// Memory is the dispatcher's memory of tasks no call waits for and of
// its conversations' activity. It is not safe for concurrent use (the
// dispatcher's mutex guards it); every method takes the time explicitly.
type Memory struct {
	keep     time.Duration
	exact    *genSet // answered and cancelled tasks, bounded by count
	detached *genSet // detached tasks, bounded by time only
	convs    *convActivity
	seed     maphash.Seed
	swept    time.Time // last sweep of the conversations
}

// New returns a memory that remembers tasks for keep and at most
// limit answered and cancelled tasks exactly.
func New(keep time.Duration, limit int) *Memory {
	return &Memory{
		keep:     keep,
		exact:    newGenSet(keep, limit),
		detached: newGenSet(keep, 0),
		convs:    newConvActivity(keep),
		seed:     maphash.MakeSeed(),
	}
}

func (m *Memory) entryOf(conv string, kind Kind) entry {
	return entry(uint32(maphash.String(m.seed, conv))&^3 | uint32(kind)) //nolint:gosec // G115: the hash is cut to 32 bits on purpose
}

// Hold counts a call of conv as pending.
func (m *Memory) Hold(conv string) { m.convs.hold(conv) }

// Release counts a pending call of conv as never dispatched.
func (m *Memory) Release(conv string) { m.convs.release(conv) }

// Finish records at now that task of conv is answered, cancelled or
// detached; pending says whether it was counted as a pending call.
func (m *Memory) Finish(now time.Time, task, conv string, kind Kind, pending bool) {
	m.convs.finish(now, conv, pending)
	if key, ok := keyOf(task); ok {
		m.exact.del(key)
		m.detached.del(key)
		set := m.exact
		if kind == Detached {
			set = m.detached
		}
		set.put(now, key, m.entryOf(conv, kind))
	}
	m.exact.expire(now)
	m.detached.expire(now)
	if now.Sub(m.swept) >= m.exact.span {
		m.convs.sweep(now)
		m.swept = now
	}
}

// Reattach forgets task as a detached one, reporting whether it was.
func (m *Memory) Reattach(task string) bool {
	key, ok := keyOf(task)
	return ok && m.detached.del(key)
}

// Classify says what a result for task in conv that no call waits for is,
// at now: the reason to refuse it with, or, when reason is empty, that it
// is only logged at Debug (note says why in both cases). cancelled is
// whether the result's status is cancelled.
//
// A task in the exact set (or detached) gets its precise class: duplicate
// (answered), late (cancelled; the worker's cancelled confirmation is
// only logged), wrong_conversation, or a detached task's result (left to
// the conversation store). Otherwise, in a conversation not known (see
// [convActivity]) the result is another process's and ignored. In a known
// conversation, a task whose ULID time lies between now−keep and the
// latest finish evicted from the exact set may have been evicted (a task
// is made before it finishes): it is refused as a duplicate, or its
// cancelled confirmation logged. Any other task is unknown_task: made
// after every eviction, it would be in the exact set had it finished
// here; made more than keep ago, it is past the window; made in the
// future, it is forged. Before the first eviction the classes are
// therefore exactly those of an unbounded memory.
//
// Precision lost after eviction, for the tasks made within keep before
// the latest eviction: a late result and one in the wrong conversation
// are both refused as duplicate, and so is a result for a task never
// dispatched here whose forged ID falls in that range; a cancelled
// result of an answered task is logged as a confirmation; a task made
// more than keep ago (a long call) that finished recently is
// unknown_task. A wall clock stepped back between a task's making and
// its finish could likewise turn a duplicate into unknown_task.
func (m *Memory) Classify(now time.Time, task, conv string, cancelled bool) (reason metrics.RefuseReason, note string) {
	id, err := protocol.ParseID(task)
	if err == nil {
		key := binary.BigEndian.Uint64(id[8:])
		e, ok := m.exact.get(key)
		if !ok {
			e, ok = m.detached.get(key)
		}
		switch {
		case !ok:
		case e&^3 != m.entryOf(conv, 0):
			return metrics.RefuseWrongConversation, "the task belongs to another conversation"
		case e.kind() == Answered:
			return metrics.RefuseDuplicate, "the task already has its result"
		case e.kind() == Detached:
			return "", "result of a detached task left to the conversation store"
		case cancelled:
			return "", "cancellation confirmed"
		default:
			return metrics.RefuseLate, "the task was cancelled"
		}
	}
	if !m.convs.known(now, conv) {
		return "", "result of another process ignored"
	}
	if err == nil {
		made := time.UnixMilli(int64(id.Time())) //nolint:gosec // G115: a ULID's time is 48 bits of milliseconds
		if !made.Before(now.Add(-m.keep)) && !made.After(m.exact.evicted) {
			if cancelled {
				return "", "cancellation confirmed (task no longer remembered exactly)"
			}
			return metrics.RefuseDuplicate, "the task already has its result or was cancelled (no longer remembered exactly)"
		}
	}
	return metrics.RefuseUnknownTask, "no call waits for this task"
}

// Exact reports whether task is among the answered and cancelled tasks
// remembered exactly (not evicted by the count).
func (m *Memory) Exact(task string) bool {
	key, ok := keyOf(task)
	if !ok {
		return false
	}
	_, ok = m.exact.get(key)
	return ok
}
