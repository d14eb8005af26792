package facestore_test

import (
	"errors"
	"testing"

	"github.com/offload-dev/offload/pkg/conversation"
	"github.com/offload-dev/offload/pkg/natsjs/facestore"
	"github.com/offload-dev/offload/pkg/protocol"
)

// TestMCPTasks: a task is stored once, found by any process under the
// owner that created it and by no other owner, listed under its owner
// only.
func TestMCPTasks(t *testing.T) {
	b := setup(t)
	open := func() *facestore.MCPTasks {
		m, err := facestore.OpenMCPTasks(t.Context(), facestore.Config{JetStream: b.srv.JetStream(t)})
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	const alice, bob = "a11ce0000000000000000000000000aa", "b0b0000000000000000000000000000b"
	a, other := open(), open()
	id := protocol.NewID()
	if err := a.Create(t.Context(), alice, id, []byte(`{"v":1}`)); err != nil {
		t.Fatal(err)
	}
	if err := other.Create(t.Context(), alice, id, []byte(`{"v":2}`)); err == nil {
		t.Fatal("a task created twice")
	}
	if rec, err := other.Get(t.Context(), alice, id); err != nil || string(rec) != `{"v":1}` {
		t.Fatalf("get: %s, %v", rec, err)
	}
	if _, err := other.Get(t.Context(), bob, id); !errors.Is(err, conversation.ErrNotFound) {
		t.Fatalf("another owner's get: %v, want not found", err)
	}
	if _, err := other.Get(t.Context(), alice, "not-a-ulid.>"); !errors.Is(err, conversation.ErrNotFound) {
		t.Fatalf("a garbled ID: %v, want not found", err)
	}
	if err := other.Put(t.Context(), alice, id, []byte(`{"v":3}`)); err != nil {
		t.Fatal(err)
	}
	second := protocol.NewID()
	if err := a.Create(t.Context(), bob, second, []byte(`{"v":4}`)); err != nil {
		t.Fatal(err)
	}
	list := func(owner string) map[string]string {
		out := map[string]string{}
		if err := other.List(t.Context(), owner, func(id string, rec []byte) bool { out[id] = string(rec); return true }); err != nil {
			t.Fatal(err)
		}
		return out
	}
	if got := list(alice); len(got) != 1 || got[id] != `{"v":3}` {
		t.Fatalf("alice's tasks: %v", got)
	}
	if got := list(bob); len(got) != 1 || got[second] != `{"v":4}` {
		t.Fatalf("bob's tasks: %v", got)
	}
	if err := a.List(t.Context(), "*", func(string, []byte) bool { return true }); err == nil {
		t.Fatal("a wildcard owner listed")
	}
}
