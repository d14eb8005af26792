package toolstate

import (
	"errors"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/offload-dev/offload/pkg/limits"
	"github.com/offload-dev/offload/pkg/natsjs"
	"github.com/offload-dev/offload/pkg/natsjs/natstest"
	"github.com/offload-dev/offload/pkg/protocol"
)

// newStore returns a store on a fresh server's default buckets.
func newStore(t *testing.T) *Store {
	t.Helper()
	nc := natstest.Start(t).Conn(t)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if err := natsjs.Provision(t.Context(), js, natsjs.ProvisionOptions{MemoryStorage: true}); err != nil {
		t.Fatal(err)
	}
	return New(js, nc, natsjs.NamesFor(protocol.DefaultPrefix))
}

// waiting returns how many updates of toolName wait for their group's
// commit.
func (s *Store) waiting(toolName string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if g := s.groups[toolName]; g != nil {
		return len(g.waiting)
	}
	return 0
}

// TestUpdatesCommittedTogether checks the group commit: the updates asked
// for while another is being stored are stored together, by one
// compare-and-set, each applied (one whose fn fails dropped alone, its
// error its caller's), each caller given the state after its own change.
func TestUpdatesCommittedTogether(t *testing.T) {
	s := newStore(t)
	ctx := t.Context()
	const tool, n = "t", 8
	hold, holding := make(chan struct{}), make(chan struct{})
	first := make(chan error, 1)
	go func() {
		_, err := s.Update(ctx, tool, func(st *limits.State) error {
			select {
			case <-holding:
			default:
				close(holding)
			}
			<-hold // the others arrive meanwhile
			_, err := st.Park(limits.Entry{ID: "first"})
			return err
		})
		first <- err
	}()
	<-holding
	type answer struct {
		i   int
		st  *limits.State
		err error
	}
	answers := make(chan answer, n)
	failed := errors.New("refused")
	for i := range n {
		go func() {
			st, err := s.Update(ctx, tool, func(st *limits.State) error {
				if _, err := st.Park(limits.Entry{ID: fmt.Sprint(i)}); err != nil {
					return err
				}
				if i == 3 {
					return failed // its entry must not be stored
				}
				return nil
			})
			answers <- answer{i, st, err}
		}()
	}
	bound := time.Now().Add(10 * time.Second)
	for s.waiting(tool) < n {
		if time.Now().After(bound) {
			close(hold)
			t.Fatalf("%d updates wait for the commit under way, want %d", s.waiting(tool), n)
		}
		runtime.Gosched() // the updates block on the store's lock, not on a clock
	}
	close(hold)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	for range n {
		a := <-answers
		switch {
		case a.i == 3:
			if !errors.Is(a.err, failed) {
				t.Errorf("update 3: error %v, want its fn's", a.err)
			}
			if _, ok := a.st.Get("3"); ok {
				t.Error("update 3: its failed change is in the state it was given")
			}
		case a.err != nil:
			t.Errorf("update %d: %v", a.i, a.err)
		default:
			if _, ok := a.st.Get(fmt.Sprint(a.i)); !ok {
				t.Errorf("update %d: its change is not in the state it was given", a.i)
			}
		}
	}
	st, rev, err := s.Load(ctx, tool)
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		_, ok := st.Get(fmt.Sprint(i))
		if want := i != 3; ok != want {
			t.Errorf("entry %d stored: %v, want %v", i, ok, want)
		}
	}
	if _, ok := st.Get("first"); !ok {
		t.Error("the first update's entry is not stored")
	}
	// The stream's sequence counts the bucket's writes: the first, then
	// the n others together.
	if rev != 2 {
		t.Errorf("the state's revision is %d after %d updates: want 2 writes, the first and the rest together", rev, n+1)
	}
}
