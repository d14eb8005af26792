package remote_test

import (
	"context"
	"testing"

	"github.com/offload-dev/offload/pkg/natsjs/internal/jstest"
	"github.com/offload-dev/offload/pkg/natsjs/remote"
	"github.com/offload-dev/offload/pkg/protocol"
)

// TestDispatchAgainAnsweredFromStoredResult: a process dispatches a task
// and dies; its worker stores the result; a new process dispatches the
// same task and attempt again (a non-blocking call's decision read again
// by agent resume). The server deduplicates the publish and no worker
// answers again: the call is answered from the stored result, which the
// new dispatcher's consumer (new results only) never delivers.
func TestDispatchAgainAnsweredFromStoredResult(t *testing.T) {
	t.Parallel()
	b := setup(t)
	first, _ := b.dispatcher(t, remote.DispatcherConfig{})
	conv := protocol.NewID()
	task := jstest.NewTask("job", conv, `{}`)
	task.Attempt, task.Approved = 1, true
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	h, err := first.Dispatch(ctx, task)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.js.Publish(ctx, protocol.Subjects{}.Result(conv, task.TaskID, task.Tool), []byte(`{"content":"42","attempt":1}`)); err != nil {
		t.Fatal(err)
	}
	if res, err := h.Wait(ctx); err != nil || string(res.Content) != `"42"` {
		t.Fatalf("first dispatch: %+v, %v", res, err)
	}

	again, _ := b.dispatcher(t, remote.DispatcherConfig{})
	h2, err := again.Dispatch(ctx, task)
	if err != nil {
		t.Fatal(err)
	}
	res, err := h2.Wait(ctx)
	if err != nil || string(res.Content) != `"42"` || res.Attempt != 1 {
		t.Fatalf("dispatched again: %+v, %v; want the stored result", res, err)
	}
}
