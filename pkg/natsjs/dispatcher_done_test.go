package natsjs

import (
	"runtime"
	"testing"
	"time"

	"github.com/offload-dev/offload/pkg/protocol"
)

// TestDoneSetForgetsAfterRemember checks that a remembered task is found
// for at least the remember window, forgotten once its generation is older
// than that, and that forgetting releases its conversation.
func TestDoneSetForgetsAfterRemember(t *testing.T) {
	const keep = 8 * time.Minute
	s := newDoneSet(keep)
	convs := newConvTable()
	conv := protocol.NewID()
	t0 := time.Unix(1_700_000_000, 0)

	task := protocol.NewID()
	key, ok := doneKey(task)
	if !ok {
		t.Fatal("a ULID has no key")
	}
	if _, ok := doneKey("not-a-ulid"); ok {
		t.Fatal("a non-ULID has a key")
	}
	s.put(t0, key, convs.hold(conv), doneCancelled)
	// Another task a little later, in the next generation.
	later := protocol.NewID()
	lkey, _ := doneKey(later)
	s.put(t0.Add(keep/doneGens), lkey, convs.hold(conv), doneAnswered)

	s.expire(t0.Add(keep), convs.release)
	if ci, kind, ok := s.get(key); !ok || kind != doneCancelled || convs.name(ci) != conv {
		t.Fatalf("task forgotten before its window: %v %v %v", ci, kind, ok)
	}
	// Past the window of the first generation: it goes, the second stays.
	s.expire(t0.Add(keep+keep/doneGens+time.Second), convs.release)
	if _, _, ok := s.get(key); ok {
		t.Fatal("task remembered past its window")
	}
	if _, kind, ok := s.get(lkey); !ok || kind != doneAnswered {
		t.Fatal("the later task was forgotten with the earlier one")
	}
	if !convs.known(conv) {
		t.Fatal("conversation released while a task of it is remembered")
	}
	if _, ok := s.del(lkey); !ok {
		t.Fatal("del did not find the later task")
	}
	convs.releaseName(conv)
	if convs.known(conv) || convs.len() != 0 {
		t.Fatal("conversation still counted after its last task")
	}
}

// TestDoneSetBytesPerTask checks the bound of issue 14: at most 64 bytes of
// heap per remembered task.
func TestDoneSetBytesPerTask(t *testing.T) {
	const n = 100_000
	keys := make([]uint64, n)
	for i := range keys {
		keys[i], _ = doneKey(protocol.NewID())
	}
	convs := newConvTable()
	ci := convs.hold(protocol.NewID())
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	s := newDoneSet(DefaultRemember)
	now := time.Now()
	for _, k := range keys {
		s.put(now, k, ci, doneAnswered)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	if s.len() != n {
		t.Fatalf("%d tasks remembered, want %d", s.len(), n)
	}
	grown := after.HeapAlloc - min(before.HeapAlloc, after.HeapAlloc)
	per := float64(grown) / n
	t.Logf("%.1f bytes per remembered task", per)
	if per > 64 {
		t.Fatalf("%.1f bytes per remembered task, want at most 64", per)
	}
	runtime.KeepAlive(s)
}
