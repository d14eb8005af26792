package facestore_test

import (
	"sync"
	"testing"

	"github.com/offload-dev/offload/pkg/natsjs/facestore"
	"github.com/offload-dev/offload/pkg/protocol"
)

// TestThreads: a thread is mapped to one conversation however many
// processes ask at once, the same one every time after, another agent's
// thread of the same ID to another conversation.
func TestThreads(t *testing.T) {
	b := setup(t)
	open := func() *facestore.Threads {
		th, err := facestore.OpenThreads(t.Context(), facestore.Config{JetStream: b.srv.JetStream(t)})
		if err != nil {
			t.Fatal(err)
		}
		return th
	}
	const thread = "3f2a9b1c-uuid-of-a-frontend"
	procs := []*facestore.Threads{open(), open(), open(), open()}
	ids := make([]string, len(procs))
	var wg sync.WaitGroup
	for i, th := range procs {
		wg.Go(func() {
			id, err := th.Conversation(t.Context(), "ops", thread)
			if err != nil {
				t.Error(err)
			}
			ids[i] = id
		})
	}
	wg.Wait()
	if _, err := protocol.ParseID(ids[0]); err != nil {
		t.Fatalf("mapped to %q: %v", ids[0], err)
	}
	for _, id := range ids {
		if id != ids[0] {
			t.Fatalf("one thread, conversations %v", ids)
		}
	}
	if again, err := open().Conversation(t.Context(), "ops", thread); err != nil || again != ids[0] {
		t.Fatalf("asked again: %q, %v; want %s", again, err, ids[0])
	}
	if other, err := procs[0].Conversation(t.Context(), "billing", thread); err != nil || other == ids[0] {
		t.Fatalf("another agent's thread: %q, %v", other, err)
	}
}
