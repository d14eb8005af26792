package convstore_test

import (
	"errors"
	"slices"
	"testing"
	"time"

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
// message of the status before, once settled (the counts follow); a message the status
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
	// Its message of running is removed off the write's path: skipped by
	// the pages meanwhile, counted until it is.
	if err := s.Flush(ctx); err != nil {
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

// A status entry written whose message of the index of statuses is lost
// (the server refused it, as a process killed between the two writes
// would leave it): SetStatus fails, the entry says the new status, and
// the pages lag (the conversation's message of its former status is
// skipped: it is on none) until RepairIndex publishes the message, which
// lists it again; the message of the former status it removes once past
// the grace, and the counts follow. A message whose entry was never
// written (killed between the message and the entry) it removes too.
func TestStatusIndexRepairedAfterLostMessage(t *testing.T) {
	t.Parallel()
	b := setup(t)
	s := b.store(t, convstore.Config{})
	ctx := t.Context()
	c, other := protocol.NewID(), protocol.NewID()
	for _, id := range []string{c, other} {
		if err := s.SetStatus(ctx, conversation.Status{ConversationID: id, Agent: "ops", Status: conversation.StatusPaused}); err != nil {
			t.Fatal(err)
		}
	}
	lister := b.store(t, convstore.Config{}) // another process's view
	page := func(status string) []string {
		t.Helper()
		return statusWalk(t, func(before uint64) ([]conversation.Status, uint64, error) {
			return lister.StatusPage(ctx, status, before, 5)
		})
	}

	convstore.LoseStatusMessages(s, errors.New("refused"))
	err := s.SetStatus(ctx, conversation.Status{ConversationID: c, Agent: "ops", Status: conversation.StatusRunning})
	if err == nil {
		t.Fatal("SetStatus with its message refused succeeded")
	}
	if st, err := lister.GetStatus(ctx, c); err != nil || st == nil || st.Status != conversation.StatusRunning {
		t.Fatalf("the entry: %+v, %v; want running", st, err)
	}
	if got := page(conversation.StatusRunning); len(got) != 0 {
		t.Fatalf("running pages before the repair: %v", got)
	}
	if got := page(""); !slices.Equal(got, []string{other}) {
		t.Fatalf("all pages before the repair: %v, want %v", got, []string{other})
	}

	// Killed between the message and the entry: a message of a status
	// no entry says, and one of a conversation with no entry.
	stray := protocol.NewID()
	for _, subject := range []string{"tools.sindex." + other + ".failed", "tools.sindex." + stray + ".running"} {
		if _, err := b.js.Publish(ctx, subject, []byte(`{}`)); err != nil {
			t.Fatal(err)
		}
	}
	// Within the grace: the missing message published, none removed.
	if added, removed, err := lister.RepairIndex(ctx); err != nil || added != 1 || removed != 0 {
		t.Fatalf("RepairIndex within the grace = %d added, %d removed, %v; want 1, 0", added, removed, err)
	}
	if got := page(conversation.StatusRunning); !slices.Equal(got, []string{c}) {
		t.Fatalf("running pages after the repair: %v, want %v", got, []string{c})
	}
	if got := page(""); !slices.Equal(got, []string{c, other}) {
		t.Fatalf("all pages after the repair: %v, want %v", got, []string{c, other})
	}
	if counts, _ := lister.StatusCounts(ctx); counts[conversation.StatusPaused] != 2 || counts[conversation.StatusRunning] != 2 {
		t.Fatalf("counts within the grace: %v; want the strays still counted", counts)
	}
	// Past the grace: the strays removed.
	convstore.SetRepairGrace(lister, 0)
	if added, removed, err := lister.RepairIndex(ctx); err != nil || added != 0 || removed != 3 {
		t.Fatalf("RepairIndex past the grace = %d added, %d removed, %v; want 0, 3", added, removed, err)
	}
	counts, err := lister.StatusCounts(ctx)
	if err != nil || counts[conversation.StatusPaused] != 1 || counts[conversation.StatusRunning] != 1 || counts[conversation.StatusFailed] != 0 {
		t.Fatalf("counts after the repair: %v, %v; want 1 paused, 1 running", counts, err)
	}
	if added, removed, err := lister.RepairIndex(ctx); err != nil || added+removed != 0 {
		t.Fatalf("RepairIndex of a true index = %d added, %d removed, %v", added, removed, err)
	}
}

// The lease holder knows the message of the index of statuses it wrote
// last: its next status change removes that one without reading the
// conversation's messages (three messages: the new one, the entry, the
// removal), and the counts follow; one of the same status is replaced on
// its subject, nothing removed.
func TestHolderReplacesItsStatusWithoutReading(t *testing.T) {
	t.Parallel()
	b := setup(t)
	js := b.srv.JetStream(t)
	s := newConvStore(t, js, convstore.Config{LeaseTTL: time.Hour}) // no renewal meanwhile
	ctx := t.Context()
	id := protocol.NewID()
	if err := s.SetStatus(ctx, conversation.Status{ConversationID: id, Agent: "ops", Status: conversation.StatusPaused}); err != nil {
		t.Fatal(err)
	}
	lease, err := s.TryClaim(ctx, id, "holder")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = lease.Release(ctx) }()
	set := func(status string) uint64 {
		t.Helper()
		before := js.Conn().Stats().OutMsgs
		if err := s.SetStatus(ctx, conversation.Status{ConversationID: id, Agent: "ops", Status: status}); err != nil {
			t.Fatal(err)
		}
		if err := s.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		return js.Conn().Stats().OutMsgs - before
	}
	if n := set(conversation.StatusRunning); n != 4 { // the paused one another run wrote: read, then removed
		t.Fatalf("the wake's status sent %d messages, want 4 (the message, the entry, the read, the removal)", n)
	}
	if n := set(conversation.StatusFinished); n != 3 {
		t.Fatalf("the run's end sent %d messages, want 3 (the message, the entry, the removal of its running)", n)
	}
	if n := set(conversation.StatusFinished); n != 2 {
		t.Fatalf("the same status again sent %d messages, want 2 (the message, the entry)", n)
	}
	counts, err := s.StatusCounts(ctx)
	if err != nil || counts[conversation.StatusFinished] != 1 || counts[conversation.StatusRunning] != 0 || counts[conversation.StatusPaused] != 0 {
		t.Fatalf("counts %v, %v; want 1 finished", counts, err)
	}
}
