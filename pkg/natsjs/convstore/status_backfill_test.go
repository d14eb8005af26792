package convstore_test

import (
	"testing"

	"github.com/offload-dev/offload/pkg/conversation"
	"github.com/offload-dev/offload/pkg/natsjs/convstore"
	"github.com/offload-dev/offload/pkg/protocol"
)

// A store written before the status index: Reproject (what agent
// provision runs) writes the missing entries from the stored states
// (paused while a call is pending, finished otherwise) and leaves an
// entry a run wrote as it is.
func TestReprojectBackfillsStatuses(t *testing.T) {
	t.Parallel()
	b := setup(t)
	s := b.store(t, convstore.Config{})
	ctx := t.Context()
	paused, done, live := sampleState(protocol.NewID(), 1), sampleState(protocol.NewID(), 1), sampleState(protocol.NewID(), 1)
	done.Pending = nil
	done.Agent = &conversation.AgentRef{Name: "ops"}
	for _, st := range []*conversation.State{paused, done, live} {
		if _, err := s.Save(ctx, st, 0); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.RecordStatus(ctx, live.ID, "ops", "running"); err != nil {
		t.Fatal(err)
	}
	if n, err := s.Reproject(ctx); err != nil || n != 3 {
		t.Fatalf("Reproject: %d, %v", n, err)
	}
	for id, want := range map[string]conversation.Status{
		paused.ID: {ConversationID: paused.ID, Status: "paused"},
		done.ID:   {ConversationID: done.ID, Agent: "ops", Status: "finished"},
		live.ID:   {ConversationID: live.ID, Agent: "ops", Status: "running"},
	} {
		got, err := s.GetStatus(ctx, id)
		if err != nil || got == nil {
			t.Fatalf("status of %s: %v %v", id, got, err)
		}
		got.UpdatedAt = want.UpdatedAt
		if *got != want {
			t.Errorf("status of %s: %+v, want %+v", id, *got, want)
		}
	}
}
