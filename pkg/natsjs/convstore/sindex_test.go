package convstore_test

import (
	"slices"
	"testing"

	"github.com/offload-dev/offload/pkg/conversation"
	"github.com/offload-dev/offload/pkg/natsjs/convstore"
	"github.com/offload-dev/offload/pkg/protocol"
)

// statusWalk reads every page of status, limit a page, and returns the
// conversations listed, in order.
func statusWalk(t *testing.T, page func(before uint64) ([]conversation.Status, uint64, error)) []string {
	t.Helper()
	var out []string
	before := uint64(0)
	for i := 0; ; i++ {
		sts, next, err := page(before)
		if err != nil {
			t.Fatal(err)
		}
		for _, st := range sts {
			out = append(out, st.ConversationID)
		}
		if next == 0 {
			return out
		}
		if i > 100 {
			t.Fatal("the pages never end")
		}
		before = next
	}
}

// The index of statuses (sindex.go): the pages list each conversation
// once, the latest changed first, of one status or of all; a status
// change moves the conversation to the first page and removes its
// message of the status before (the counts follow); a message the status
// entry does not say (a process killed between the two writes) is
// skipped.
func TestStatusPages(t *testing.T) {
	t.Parallel()
	b := setup(t)
	s := b.store(t, convstore.Config{})
	ctx := t.Context()
	var ids []string
	for i := range 30 {
		id := protocol.NewID()
		ids = append(ids, id)
		status := conversation.Statuses[i%len(conversation.Statuses)]
		if err := s.SetStatus(ctx, conversation.Status{ConversationID: id, Agent: "ops", Status: status}); err != nil {
			t.Fatal(err)
		}
	}
	newestFirst := slices.Clone(ids)
	slices.Reverse(newestFirst)
	got := statusWalk(t, func(before uint64) ([]conversation.Status, uint64, error) { return s.StatusPage(ctx, "", before, 7) })
	if !slices.Equal(got, newestFirst) {
		t.Fatalf("the pages list %v, want %v", got, newestFirst)
	}
	var failed []string
	for i := len(ids) - 1; i >= 0; i-- {
		if conversation.Statuses[i%len(conversation.Statuses)] == conversation.StatusFailed {
			failed = append(failed, ids[i])
		}
	}
	got = statusWalk(t, func(before uint64) ([]conversation.Status, uint64, error) {
		return s.StatusPage(ctx, conversation.StatusFailed, before, 2)
	})
	if !slices.Equal(got, failed) {
		t.Fatalf("the failed pages list %v, want %v", got, failed)
	}
	counts, err := s.StatusCounts(ctx)
	if err != nil || counts[conversation.StatusRunning] != 8 || counts[conversation.StatusFailed] != 7 {
		t.Fatalf("counts %v, %v; want 8 running, 7 failed", counts, err)
	}

	// ids[0] (running) finishes: first on the first page, not running.
	if err := s.SetStatus(ctx, conversation.Status{ConversationID: ids[0], Agent: "ops", Status: conversation.StatusFinished}); err != nil {
		t.Fatal(err)
	}
	first, _, err := s.StatusPage(ctx, "", 0, 3)
	if err != nil || len(first) != 3 || first[0].ConversationID != ids[0] || first[0].Status != conversation.StatusFinished {
		t.Fatalf("first page after the change: %+v, %v", first, err)
	}
	if counts, _ := s.StatusCounts(ctx); counts[conversation.StatusRunning] != 7 || counts[conversation.StatusFinished] != 8 {
		t.Fatalf("counts after the change: %v", counts)
	}
	running := statusWalk(t, func(before uint64) ([]conversation.Status, uint64, error) {
		return s.StatusPage(ctx, conversation.StatusRunning, before, 3)
	})
	if slices.Contains(running, ids[0]) || len(running) != 7 {
		t.Fatalf("running pages: %v", running)
	}
	// Killed between the message and the entry: ids[1] (paused) said
	// failed in the index only.
	if _, err := b.js.Publish(ctx, "tools.sindex."+ids[1]+".failed", []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	got = statusWalk(t, func(before uint64) ([]conversation.Status, uint64, error) {
		return s.StatusPage(ctx, conversation.StatusFailed, before, 2)
	})
	if !slices.Equal(got, failed) {
		t.Fatalf("the failed pages list %v after a stale message, want %v", got, failed)
	}
	all := statusWalk(t, func(before uint64) ([]conversation.Status, uint64, error) { return s.StatusPage(ctx, "", before, 4) })
	if n := len(slices.DeleteFunc(slices.Clone(all), func(id string) bool { return id != ids[1] })); len(all) != 30 || n != 1 {
		t.Fatalf("all pages list %d conversations (%v), want 30 each once", len(all), all)
	}
}
