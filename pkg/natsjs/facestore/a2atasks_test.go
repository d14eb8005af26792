package facestore_test

import (
	"errors"
	"slices"
	"sync"
	"testing"

	"github.com/offload-dev/offload/pkg/conversation"
	"github.com/offload-dev/offload/pkg/natsjs/facestore"
	"github.com/offload-dev/offload/pkg/protocol"
)

// TestA2ATasks: a record is its owner's alone (another owner's read is
// not found and its list empty); an update of a revision read before is
// a conflict, of concurrent writers one wins each round; a second create
// of an ID and an ID that is not a ULID are refused; tasks created at
// once by several replicas are all listed.
func TestA2ATasks(t *testing.T) {
	b := setup(t)
	open := func() *facestore.A2ATasks {
		s, err := facestore.OpenA2ATasks(t.Context(), facestore.Config{JetStream: b.srv.JetStream(t)})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	s, other := open(), open()
	ctx := t.Context()
	id := protocol.NewID()
	if err := s.Create(ctx, "alice", id, []byte(`{"v":0}`)); err != nil {
		t.Fatal(err)
	}
	if err := other.Create(ctx, "alice", id, []byte(`{"v":9}`)); !errors.Is(err, conversation.ErrConflict) {
		t.Fatalf("second create: %v", err)
	}
	if _, _, err := s.Get(ctx, "mallory", id); !errors.Is(err, conversation.ErrNotFound) {
		t.Fatalf("another owner's get: %v", err)
	}
	if _, _, err := s.Get(ctx, "alice", "../a2a.tasks.x"); !errors.Is(err, conversation.ErrNotFound) {
		t.Fatalf("an ID that is no ULID: %v", err)
	}
	var mine []string
	if err := other.List(ctx, "mallory", func(data []byte) error { mine = append(mine, string(data)); return nil }); err != nil || len(mine) != 0 {
		t.Fatalf("another owner's list: %v %v", mine, err)
	}
	data, rev, err := other.Get(ctx, "alice", id)
	if err != nil || string(data) != `{"v":0}` {
		t.Fatalf("get: %q %v", data, err)
	}
	// Writers of the same revision: exactly one wins.
	var wins int
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i := range 4 {
		st := []*facestore.A2ATasks{s, other}[i%2]
		wg.Go(func() {
			_, err := st.Update(ctx, "alice", id, []byte(`{"v":1}`), rev)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				wins++
			case !errors.Is(err, conversation.ErrConflict):
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if wins != 1 {
		t.Fatalf("updates of one revision: %d won", wins)
	}
	second := protocol.NewID()
	if err := s.Create(ctx, "alice", second, []byte(`{"v":2}`)); err != nil {
		t.Fatal(err)
	}
	var all []string
	if err := other.List(ctx, "alice", func(data []byte) error { all = append(all, string(data)); return nil }); err != nil {
		t.Fatal(err)
	}
	slices.Sort(all)
	if !slices.Equal(all, []string{`{"v":1}`, `{"v":2}`}) {
		t.Fatalf("list: %v", all)
	}
	// A message ID maps to the first task asked; another owner's message
	// of the same ID is its own.
	if got, err := s.Message(ctx, "alice", "m-1", id); err != nil || got != id {
		t.Fatalf("first message: %q %v", got, err)
	}
	if got, err := other.Message(ctx, "alice", "m-1", second); err != nil || got != id {
		t.Fatalf("the message again: %q %v, want %s", got, err, id)
	}
	if got, err := other.Message(ctx, "mallory", "m-1", second); err != nil || got != second {
		t.Fatalf("another owner's message: %q %v", got, err)
	}
	// Tasks of one owner created at once by several replicas: each is
	// in the owner's index.
	var ids sync.Map
	for i := range 8 {
		st := []*facestore.A2ATasks{s, other}[i%2]
		wg.Go(func() {
			id := protocol.NewID()
			if err := st.Create(ctx, "bob", id, []byte(`"`+id+`"`)); err != nil {
				t.Error(err)
			}
			ids.Store(`"`+id+`"`, true)
		})
	}
	wg.Wait()
	listed := 0
	if err := s.List(ctx, "bob", func(data []byte) error {
		if _, ok := ids.Load(string(data)); !ok {
			t.Errorf("listed %s, not created", data)
		}
		listed++
		return nil
	}); err != nil || listed != 8 {
		t.Fatalf("bob's list: %d of 8, %v", listed, err)
	}
}

// TestA2APushesWatched: a task watched twice is listed once, the
// watches of replicas at once are all kept, and an unwatched task is no
// longer listed.
func TestA2APushesWatched(t *testing.T) {
	b := setup(t)
	ctx := t.Context()
	s, err := facestore.OpenA2ATasks(ctx, facestore.Config{JetStream: b.srv.JetStream(t)})
	if err != nil {
		t.Fatal(err)
	}
	ids := []string{protocol.NewID(), protocol.NewID(), protocol.NewID(), protocol.NewID()}
	var wg sync.WaitGroup
	for i, id := range ids {
		wg.Go(func() {
			if err := s.Watch(ctx, []string{"alice", "bob"}[i%2], id); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if err := s.Watch(ctx, "alice", ids[0]); err != nil {
		t.Fatal(err)
	}
	if err := s.Unwatch(ctx, "bob", ids[1]); err != nil {
		t.Fatal(err)
	}
	var got []string
	if err := s.Watched(ctx, func(owner, id string) { got = append(got, owner+"/"+id) }); err != nil {
		t.Fatal(err)
	}
	slices.Sort(got)
	want := []string{"alice/" + ids[0], "alice/" + ids[2], "bob/" + ids[3]}
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("watched: %v, want %v", got, want)
	}
}
