package storetest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/offload-dev/offload/internal/offloadtest"
	"github.com/offload-dev/offload/pkg/conversation"
	"github.com/offload-dev/offload/pkg/deferred"
	"github.com/offload-dev/offload/pkg/message"
	"github.com/offload-dev/offload/pkg/protocol"
)

// shortClaim is the claim wait of the cases that wait it out.
const shortClaim = 600 * time.Millisecond

// longClaim is the claim wait of the cases in which a claim must end by a
// release, not by giving up.
const longClaim = time.Minute

// sample returns the state of conversation id with n messages and one
// pending approval.
func sample(id string, n int) *conversation.State {
	st := &conversation.State{ID: id, Pending: &deferred.PendingRecord{ConversationID: id, RunID: protocol.NewID(), Tasks: []deferred.PendingTask{
		{TaskID: protocol.NewID(), Kind: deferred.KindApproval, Tool: "shell", ToolCallID: "call_1", Args: []byte(`{"cmd":"ls"}`)},
		{TaskID: protocol.NewID(), Kind: deferred.KindBackground, Tool: "x", ToolCallID: "call_2"},
	}}}
	for i := range n {
		st.History = append(st.History, message.NewRequest(message.UserText(fmt.Sprintf("%s%d", strings.Repeat("x", 100), i))))
	}
	return st
}

// text returns the text of message i of st's history.
func text(st *conversation.State, i int) string {
	return st.History[i].Parts[0].(message.UserPrompt).Content[0].Text
}

func save(t *testing.T, s conversation.Store, st *conversation.State, prev conversation.Revision) conversation.Revision {
	t.Helper()
	rev, err := s.Save(context.Background(), st, prev)
	if err != nil {
		t.Fatalf("save of %s at revision %d: %v", st.ID, prev, err)
	}
	return rev
}

func load(t *testing.T, s conversation.Store, id string) (*conversation.State, conversation.Revision) {
	t.Helper()
	st, rev, err := s.Load(context.Background(), id)
	if err != nil {
		t.Fatalf("load of %s: %v", id, err)
	}
	return st, rev
}

// A conversation never saved is not found.
func loadUnknown(t *testing.T, h Harness) {
	s := h.New(t, shortClaim)(t)
	if _, _, err := s.Load(context.Background(), protocol.NewID()); !errors.Is(err, conversation.ErrNotFound) {
		t.Fatalf("load of a new conversation: %v, want ErrNotFound", err)
	}
}

// What one process saves, another loads whole at the same revision: the
// history, the pending record and its tasks.
func saveLoad(t *testing.T, h Harness) {
	open := h.New(t, shortClaim)
	s := open(t)
	st := sample(protocol.NewID(), 2)
	rev := save(t, s, st, 0)
	got, grev := load(t, open(t), st.ID)
	if grev != rev || len(got.History) != 2 || text(got, 1) != text(st, 1) {
		t.Fatalf("loaded %d messages at revision %d, saved 2 at %d", len(got.History), grev, rev)
	}
	want := st.Pending.Tasks[0]
	if task, ok := got.PendingTask(want.TaskID); !ok || task.Tool != "shell" || task.Kind != deferred.KindApproval || string(task.Args) != `{"cmd":"ls"}` {
		t.Fatalf("pending task %s: %+v %v", want.TaskID, task, ok)
	}
	if _, ok := got.PendingTask(protocol.NewID()); ok {
		t.Fatal("a task never pending was found")
	}
	if got.Pending.RunID != st.Pending.RunID || len(got.Pending.Tasks) != 2 {
		t.Fatalf("pending record %+v, want %+v", got.Pending, st.Pending)
	}
}

// A conversation is created once: a second save at revision 0 conflicts.
func createOnce(t *testing.T, h Harness) {
	s := h.New(t, shortClaim)(t)
	st := sample(protocol.NewID(), 2)
	save(t, s, st, 0)
	if _, err := s.Save(context.Background(), st, 0); !errors.Is(err, conversation.ErrConflict) {
		t.Fatalf("second create: %v, want ErrConflict", err)
	}
}

// The loaded state is a copy: changing it changes nothing stored.
func loadedCopy(t *testing.T, h Harness) {
	s := h.New(t, shortClaim)(t)
	st := sample(protocol.NewID(), 1)
	save(t, s, st, 0)
	got, _ := load(t, s, st.ID)
	got.History = nil
	got.Pending.Tasks[0].Tool = "changed"
	if again, _ := load(t, s, st.ID); len(again.History) != 1 || again.Pending.Tasks[0].Tool != "shell" {
		t.Fatal("the store shares state with its caller")
	}
	st.History = nil // nor does changing what was saved
	if again, _ := load(t, s, st.ID); len(again.History) != 1 {
		t.Fatal("the store keeps the caller's state")
	}
}

// Saves are compare-and-set: a save at a revision the conversation is not
// at (stale, after another process's save, or ahead) conflicts and changes
// nothing; with a short history and a long one (which a store may keep
// apart, as convstore does in its object store).
func compareAndSet(t *testing.T, h Harness) {
	open := h.New(t, shortClaim)
	s, other := open(t), open(t)
	for _, n := range []int{2, 200} {
		st := sample(protocol.NewID(), n)
		rev := save(t, s, st, 0)
		if _, err := s.Save(context.Background(), st, rev+1); !errors.Is(err, conversation.ErrConflict) {
			t.Fatalf("%d messages: save at a revision ahead: %v, want ErrConflict", n, err)
		}
		got, grev := load(t, other, st.ID)
		got.History = append(got.History, message.NewRequest(message.UserText("more")))
		rev2 := save(t, other, got, grev)
		if rev2 == rev {
			t.Fatalf("%d messages: a save kept the revision %d", n, rev)
		}
		if _, err := s.Save(context.Background(), st, rev); !errors.Is(err, conversation.ErrConflict) {
			t.Fatalf("%d messages: stale save: %v, want ErrConflict", n, err)
		}
		back, rev3 := load(t, s, st.ID)
		if rev3 != rev2 || len(back.History) != n+1 || text(back, n) != "more" {
			t.Fatalf("after the conflict: %d messages at %d, want %d at %d", len(back.History), rev3, n+1, rev2)
		}
	}
}

// A long history (about 20 KiB) round-trips, and a save that shortens it
// again loads short.
func longHistory(t *testing.T, h Harness) {
	open := h.New(t, shortClaim)
	s := open(t)
	st := sample(protocol.NewID(), 200)
	rev := save(t, s, st, 0)
	got, grev := load(t, open(t), st.ID)
	if grev != rev || len(got.History) != 200 || text(got, 199) != text(st, 199) {
		t.Fatalf("loaded %d messages at %d, saved 200 at %d", len(got.History), grev, rev)
	}
	got.History = got.History[:3]
	rev = save(t, s, got, grev)
	if back, brev := load(t, open(t), st.ID); brev != rev || len(back.History) != 3 {
		t.Fatalf("after shortening: %d messages at %d, want 3 at %d", len(back.History), brev, rev)
	}
}

// List returns the IDs of the stored conversations, sorted (none for an
// empty store).
func listSorted(t *testing.T, h Harness) {
	open := h.New(t, shortClaim)
	s := open(t)
	ids, err := s.List(context.Background())
	if err != nil || len(ids) != 0 {
		t.Fatalf("list of an empty store: %v %v", ids, err)
	}
	want := []string{protocol.NewID(), protocol.NewID(), protocol.NewID()}
	for _, i := range []int{2, 0, 1} {
		save(t, s, sample(want[i], 1), 0)
	}
	slices.Sort(want)
	if ids, err = open(t).List(context.Background()); err != nil || !slices.Equal(ids, want) {
		t.Fatalf("list %v (%v), want %v", ids, err, want)
	}
}

// A conversation another holder keeps cannot be claimed: the claim waits
// (about claimWait: the holder renews its lease meanwhile), then fails
// with a *ClaimedError naming the holder (errors.Is ErrClaimed), and the
// holder's lease is not lost meanwhile.
func claimHeld(t *testing.T, h Harness) {
	open := h.New(t, shortClaim)
	a, b := open(t), open(t)
	ctx := context.Background()
	id := protocol.NewID()
	la, err := a.Claim(ctx, id, "agent-a")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = la.Release(ctx) }()
	start := time.Now()
	_, err = b.Claim(ctx, id, "agent-b")
	var ce *conversation.ClaimedError
	if !errors.As(err, &ce) || !errors.Is(err, conversation.ErrClaimed) || ce.Holder != "agent-a" || ce.ID != id {
		t.Fatalf("claim of a held conversation: %v", err)
	}
	if waited := time.Since(start); waited < shortClaim-100*time.Millisecond {
		t.Errorf("gave up after %v, before the lease could lapse (%v)", waited, shortClaim)
	}
	select {
	case <-la.Lost():
		t.Fatal("the holder's lease was lost while it renewed")
	default:
	}
}

// A claim waiting for a held conversation gets it when the holder
// releases it, long before the claim would give up.
func releaseWakesClaim(t *testing.T, h Harness) {
	open := h.New(t, longClaim)
	a, b := open(t), open(t)
	ctx := context.Background()
	id := protocol.NewID()
	la, err := a.Claim(ctx, id, "agent-a")
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		lb, err := b.Claim(ctx, id, "agent-b")
		if err == nil {
			err = lb.Release(ctx)
		}
		got <- err
	}()
	if err := la.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := offloadtest.WaitOrTimeout(t, got, "the waiting claim after the release"); err != nil {
		t.Fatal(err)
	}
}

// A released conversation is claimed at once by another holder, and again
// by the first; releasing twice is harmless.
func claimAfterRelease(t *testing.T, h Harness) {
	open := h.New(t, longClaim)
	a, b := open(t), open(t)
	ctx := context.Background()
	id := protocol.NewID()
	for i, s := range []conversation.Store{a, b, a} {
		l, err := s.Claim(ctx, id, fmt.Sprintf("holder-%d", i))
		if err != nil {
			t.Fatalf("claim %d: %v", i, err)
		}
		for range 2 {
			if err := l.Release(ctx); err != nil {
				t.Fatalf("release %d: %v", i, err)
			}
		}
	}
}
