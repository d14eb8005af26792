package taskmem

import (
	"crypto/rand"
	"runtime"
	"testing"
	"testing/synctest"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/offload-dev/offload/pkg/metrics"
	"github.com/offload-dev/offload/pkg/protocol"
)

// defaultWindow is the dispatcher's default window (remote.DefaultDedupWindow).
const defaultWindow = 10 * time.Minute

// idAt returns a new task ID whose ULID time is t.
func idAt(t time.Time) string {
	return ulid.MustNew(ulid.Timestamp(t), rand.Reader).String()
}

func mustKey(t *testing.T, task string) uint64 {
	t.Helper()
	key, ok := keyOf(task)
	if !ok {
		t.Fatalf("%q has no key", task)
	}
	return key
}

// TestDoneSetForgetsAfterRemember checks that a remembered task is found
// for at least the remember window and forgotten once every task of its
// generation is older than that. The clock is synctest's: the tasks'
// IDs are made and the set expired at the time the test sleeps to.
func TestDoneSetForgetsAfterRemember(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const keep = 8 * time.Minute
		s := newGenSet(keep, 0)
		if _, ok := keyOf("not-a-ulid"); ok {
			t.Fatal("a non-ULID has a key")
		}
		key := mustKey(t, protocol.NewID())
		s.put(time.Now(), key, entry(Cancelled))
		// Another task a little later, in the next generation.
		time.Sleep(keep / generations)
		lkey := mustKey(t, protocol.NewID())
		s.put(time.Now(), lkey, entry(Answered))

		time.Sleep(keep - keep/generations) // the first task's window ends now
		s.expire(time.Now())
		if e, ok := s.get(key); !ok || e.kind() != Cancelled {
			t.Fatalf("task forgotten before its window: %v %v", e, ok)
		}
		// Past the window of the first generation: it goes, the second stays.
		time.Sleep(time.Second)
		s.expire(time.Now())
		if _, ok := s.get(key); ok {
			t.Fatal("task remembered past its window")
		}
		if e, ok := s.get(lkey); !ok || e.kind() != Answered {
			t.Fatal("the later task was forgotten with the earlier one")
		}
		// The last generation goes too once it is old (nothing put since).
		time.Sleep(keep / generations)
		s.expire(time.Now())
		if _, ok := s.get(lkey); ok || s.len() != 0 || len(s.gens) != 0 {
			t.Fatalf("%d tasks in %d generations remembered past the window", s.len(), len(s.gens))
		}
		s.put(time.Now(), key, 0)
		if !s.del(key) || s.del(key) || s.len() != 0 {
			t.Fatal("del")
		}
	})
}

// TestDoneSetCapEvicts checks that a set with a limit holds at most that
// many tasks, dropping the oldest generations (at one instant too: the
// generations are cut by count as well as by time), and records the latest
// time among the tasks dropped.
func TestDoneSetCapEvicts(t *testing.T) {
	const limit = 16
	s := newGenSet(defaultWindow, limit)
	t0 := time.Unix(1_700_000_000, 0)
	var keys []uint64
	for i := range 100 {
		k := mustKey(t, protocol.NewID())
		keys = append(keys, k)
		at := t0
		if i >= 50 {
			at = t0.Add(time.Second)
		}
		s.put(at, k, 0)
		if s.len() > limit {
			t.Fatalf("%d tasks remembered after %d puts, limit %d", s.len(), i+1, limit)
		}
	}
	if s.len() < limit-limit/generations {
		t.Fatalf("%d tasks remembered, want about %d", s.len(), limit)
	}
	if _, ok := s.get(keys[0]); ok {
		t.Fatal("the oldest task survived the limit")
	}
	if _, ok := s.get(keys[99]); !ok {
		t.Fatal("the newest task was evicted")
	}
	if !s.evicted.Equal(t0.Add(time.Second)) {
		t.Fatalf("evicted up to %v, want %v", s.evicted, t0.Add(time.Second))
	}
	// Without a limit nothing is evicted.
	u := newGenSet(defaultWindow, 0)
	for range 100 {
		u.put(t0, mustKey(t, protocol.NewID()), 0)
	}
	if u.len() != 100 || !u.evicted.IsZero() {
		t.Fatalf("unlimited set: %d tasks, evicted %v", u.len(), u.evicted)
	}
}

// heapGrowth returns the live heap that f adds (and keeps alive through
// its result).
func heapGrowth(f func() any) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	v := f()
	runtime.GC()
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(v)
	return after.HeapAlloc - min(before.HeapAlloc, after.HeapAlloc)
}

// TestDoneSetBytesPerTask checks the bound of issue 14: at most 64 bytes of
// heap per remembered task.
func TestDoneSetBytesPerTask(t *testing.T) {
	const n = 100_000
	keys := make([]uint64, n)
	for i := range keys {
		keys[i], _ = keyOf(protocol.NewID())
	}
	var s *genSet
	grown := heapGrowth(func() any {
		s = newGenSet(defaultWindow, 0)
		now := time.Now()
		for _, k := range keys {
			s.put(now, k, entry(Answered))
		}
		return s
	})
	if s.len() != n {
		t.Fatalf("%d tasks remembered, want %d", s.len(), n)
	}
	per := float64(grown) / n
	t.Logf("%.1f bytes per remembered task", per)
	if per > 64 {
		t.Fatalf("%.1f bytes per remembered task, want at most 64", per)
	}
}

// TestTaskMemoryBounded checks that the dispatcher's memory stays bounded
// (about 2 MiB) however many calls of one conversation finish within the
// window: the exact set holds at most DefaultLimit tasks, the conversations one
// entry each.
func TestTaskMemoryBounded(t *testing.T) {
	const n = 300_000
	keys := make([]string, 0, 4096)
	for range cap(keys) {
		keys = append(keys, protocol.NewID())
	}
	conv := protocol.NewID()
	var m *Memory
	grown := heapGrowth(func() any {
		m = New(defaultWindow, DefaultLimit)
		now := time.Unix(1_700_000_000, 0)
		for i := range n {
			// Distinct keys without n strings.
			now = now.Add(100 * time.Microsecond) // 10 000 calls/s
			key := mustKey(t, keys[i%len(keys)]) + uint64(i/len(keys))<<40
			m.convs.hold(conv)
			m.convs.finish(now, conv, true)
			m.exact.put(now, key, m.entryOf(conv, Answered))
			m.exact.expire(now)
		}
		return m
	})
	t.Logf("%d tasks remembered exactly, %d conversations, %.2f MiB", m.exact.len(), m.convs.len(), float64(grown)/(1<<20))
	if m.exact.len() > DefaultLimit || m.convs.len() != 1 {
		t.Fatalf("%d tasks, %d conversations remembered", m.exact.len(), m.convs.len())
	}
	if grown > 2<<20 {
		t.Fatalf("the memory holds %.2f MiB after %d calls, want at most 2 MiB", float64(grown)/(1<<20), n)
	}
}

// TestTaskMemoryClassifies checks the class of a result no call waits for,
// exact and after eviction, on synctest's clock: tasks are made (their
// ULID time) and finished at the time the test sleeps to, as in a
// dispatcher.
func TestTaskMemoryClassifies(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const limit = 16
		keep := defaultWindow
		t0 := time.Now()
		m := New(keep, limit)
		conv, other, foreign := protocol.NewID(), protocol.NewID(), protocol.NewID()

		// Tasks made and finished one millisecond apart; the first ones are
		// evicted by the later ones.
		var tasks []string
		for i := range 100 {
			if i > 0 {
				time.Sleep(time.Millisecond)
			}
			task := protocol.NewID()
			tasks = append(tasks, task)
			m.Hold(conv)
			kind := Answered
			if i%2 == 1 {
				kind = Cancelled
			}
			m.Finish(time.Now(), task, conv, kind, true)
		}
		m.Hold(other)
		m.Finish(time.Now(), protocol.NewID(), other, Answered, true)
		if m.exact.len() > limit {
			t.Fatalf("%d tasks remembered exactly, limit %d", m.exact.len(), limit)
		}
		recent, recentCancelled := tasks[98], tasks[99] // even ones answered, odd ones cancelled
		evicted, evictedCancelled := tasks[0], tasks[1]
		if _, ok := m.exact.get(mustKey(t, evicted)); ok {
			t.Fatal("the first task was not evicted")
		}
		if _, ok := m.exact.get(mustKey(t, recent)); !ok {
			t.Fatal("the last task was evicted")
		}
		time.Sleep(time.Minute)
		later := time.Now()
		for _, c := range []struct {
			name       string
			task, conv string
			cancelled  bool
			want       metrics.RefuseReason // "" for a Debug log
			note       string
		}{
			{"exact: answered", recent, conv, false, metrics.RefuseDuplicate, ""},
			{"exact: cancelled", recentCancelled, conv, false, metrics.RefuseLate, ""},
			{"exact: cancellation confirmed", recentCancelled, conv, true, "", "cancellation confirmed"},
			{"exact: wrong conversation", recent, other, false, metrics.RefuseWrongConversation, ""},
			{"exact: wrong, unknown conversation", recent, foreign, false, metrics.RefuseWrongConversation, ""},
			{"evicted: answered", evicted, conv, false, metrics.RefuseDuplicate, ""},
			{"evicted: cancelled, late result", evictedCancelled, conv, false, metrics.RefuseDuplicate, ""},
			{"evicted: cancellation confirmed", evictedCancelled, conv, true, "", "cancellation confirmed (task no longer remembered exactly)"},
			{"evicted: in another known conversation", evicted, other, false, metrics.RefuseDuplicate, ""},
			{"evicted: in an unknown conversation", evicted, foreign, false, "", "result of another process ignored"},
			{"never dispatched, made after every eviction", protocol.NewID(), conv, false, metrics.RefuseUnknownTask, ""},
			{"forged: older than the window", idAt(later.Add(-keep - time.Second)), conv, false, metrics.RefuseUnknownTask, ""},
			{"forged: in the future", idAt(later.Add(time.Hour)), conv, false, metrics.RefuseUnknownTask, ""},
			{"forged: in the future, cancelled", idAt(later.Add(time.Hour)), conv, true, metrics.RefuseUnknownTask, ""},
			{"not a ULID", "not-a-ulid", conv, false, metrics.RefuseUnknownTask, ""},
			{"not a ULID, unknown conversation", "not-a-ulid", foreign, false, "", "result of another process ignored"},
		} {
			reason, note := m.Classify(time.Now(), c.task, c.conv, c.cancelled)
			if reason != c.want || (c.want == "" && note != c.note) {
				t.Errorf("%s: %q (%s), want %q %s", c.name, reason, note, c.want, c.note)
			}
		}
		// The fallback holds for the window only: past it, an evicted task is
		// unknown_task while its conversation is still known.
		m.Hold(conv)
		time.Sleep(time.Until(t0.Add(keep + time.Second)))
		if reason, _ := m.Classify(time.Now(), evicted, conv, false); reason != metrics.RefuseUnknownTask {
			t.Errorf("evicted task past the window: %q, want unknown_task", reason)
		}
	})
}

// TestTaskMemoryKeepsDetached checks that detached tasks are never evicted
// by the count: a resume in this process re-attaches them however many
// calls finished meanwhile (on synctest's clock).
func TestTaskMemoryKeepsDetached(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const limit = 16
		t0 := time.Now()
		m := New(defaultWindow, limit)
		conv := protocol.NewID()
		var detached []string
		for range 3 * limit {
			task := protocol.NewID()
			detached = append(detached, task)
			m.Hold(conv)
			m.Finish(time.Now(), task, conv, Detached, true)
		}
		for range 10 * limit {
			time.Sleep(time.Millisecond)
			m.Hold(conv)
			m.Finish(time.Now(), protocol.NewID(), conv, Answered, true)
		}
		time.Sleep(time.Until(t0.Add(time.Second)))
		for _, task := range detached {
			if reason, note := m.Classify(time.Now(), task, conv, false); reason != "" || note != "result of a detached task left to the conversation store" {
				t.Fatalf("detached task after %d calls: %q %s", 10*limit, reason, note)
			}
		}
		if !m.Reattach(detached[0]) || m.Reattach(detached[0]) {
			t.Fatal("reattach of a detached task")
		}
		if m.Reattach(protocol.NewID()) {
			t.Fatal("reattach of a task never detached")
		}
		// A detached task answered later (its call re-attached and finished)
		// leaves the detached ones.
		m.Finish(time.Now(), detached[1], conv, Answered, false)
		if m.Reattach(detached[1]) {
			t.Fatal("an answered task is still detached")
		}
		// Detached tasks are still forgotten after the window.
		time.Sleep(time.Until(t0.Add(defaultWindow + time.Minute)))
		m.Finish(time.Now(), protocol.NewID(), conv, Answered, false)
		if m.detached.len() != 0 {
			t.Fatalf("%d detached tasks remembered past the window", m.detached.len())
		}
	})
}

// TestConvActivityExpires checks that a conversation stays known while it
// has calls pending or finished one within the window, and is forgotten
// after: one entry per conversation whatever its calls, no per-call count
// (on synctest's clock).
func TestConvActivityExpires(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		keep := defaultWindow
		m := New(keep, 16)
		conv, busy, failed := protocol.NewID(), protocol.NewID(), protocol.NewID()
		var last time.Time
		for i := range 10_000 {
			if i > 0 {
				time.Sleep(time.Millisecond)
			}
			last = time.Now()
			m.Hold(conv)
			m.Finish(last, protocol.NewID(), conv, Answered, true)
		}
		m.Hold(busy) // pending for ever
		m.Hold(failed)
		m.Release(failed) // its dispatch failed: nothing to remember
		if n := m.convs.len(); n != 2 {
			t.Fatalf("%d conversations tracked after 10 000 calls of one and one pending, want 2", n)
		}
		time.Sleep(keep)
		if !m.convs.known(time.Now(), conv) {
			t.Fatal("a conversation is forgotten before the window after its last call ends")
		}
		time.Sleep(time.Nanosecond)
		if m.convs.known(time.Now(), conv) {
			t.Fatal("a conversation is known past the window after its last call")
		}
		if reason, note := m.Classify(time.Now(), idAt(last), conv, false); reason != "" || note != "result of another process ignored" {
			t.Fatalf("result in an expired conversation: %q %s", reason, note)
		}
		m.Finish(time.Now(), protocol.NewID(), busy, Cancelled, false) // sweeps
		if m.convs.known(time.Now(), conv) || !m.convs.known(time.Now(), busy) || m.convs.len() != 1 {
			t.Fatalf("after the sweep: %d conversations tracked", m.convs.len())
		}
		if m.exact.len() != 1 {
			t.Fatalf("%d tasks remembered past the window", m.exact.len())
		}
	})
}
