package conversation_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/offload-dev/offload/pkg/conversation"
	"github.com/offload-dev/offload/pkg/deferred"
	"github.com/offload-dev/offload/pkg/message"
)

func TestMemoryStore(t *testing.T) {
	ctx := context.Background()
	s := conversation.NewMemory()
	if _, _, err := s.Load(ctx, "c1"); !errors.Is(err, conversation.ErrNotFound) {
		t.Fatalf("load: %v", err)
	}
	st := &conversation.State{ID: "c1", History: message.History{message.NewRequest(message.UserText("hi"))},
		Pending: &deferred.PendingRecord{ConversationID: "c1", Tasks: []deferred.PendingTask{{TaskID: "t1", Kind: deferred.KindBackground, Tool: "x"}}}}
	rev, err := s.Save(ctx, st, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Save(ctx, st, 0); !errors.Is(err, conversation.ErrConflict) {
		t.Fatalf("second create: %v", err)
	}
	got, grev, err := s.Load(ctx, "c1")
	if err != nil || grev != rev || len(got.History) != 1 {
		t.Fatalf("load: %+v %d %v", got, grev, err)
	}
	if task, ok := got.PendingTask("t1"); !ok || task.Tool != "x" {
		t.Fatalf("pending task: %+v %v", task, ok)
	}
	if _, ok := got.PendingTask("t2"); ok {
		t.Fatal("unknown task found")
	}
	// The loaded state is a copy: changing it changes nothing stored.
	got.History = nil
	if again, _, _ := s.Load(ctx, "c1"); len(again.History) != 1 {
		t.Fatal("the store shares state with its caller")
	}
	if _, err := s.Save(ctx, st, rev+1); !errors.Is(err, conversation.ErrConflict) {
		t.Fatalf("save at a wrong revision: %v", err)
	}
	if ids, _ := s.List(ctx); len(ids) != 1 || ids[0] != "c1" {
		t.Fatalf("list %v", ids)
	}
}

func TestMemoryLease(t *testing.T) {
	ctx := context.Background()
	s := conversation.NewMemory()
	s.ClaimWait = 50 * time.Millisecond
	l, err := s.Claim(ctx, "c1", "a")
	if err != nil {
		t.Fatal(err)
	}
	var ce *conversation.ClaimedError
	if _, err := s.Claim(ctx, "c1", "b"); !errors.As(err, &ce) || ce.Holder != "a" || !errors.Is(err, conversation.ErrClaimed) {
		t.Fatalf("claim of a held conversation: %v", err)
	}
	s.ClaimWait = time.Minute
	got := make(chan error, 1)
	go func() {
		l2, err := s.Claim(ctx, "c1", "b")
		if err == nil {
			err = l2.Release(ctx)
		}
		got <- err
	}()
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the release did not wake the waiting claim")
	}
}
