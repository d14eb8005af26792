package remote_test

import (
	"fmt"
	"testing"

	"github.com/offload-dev/offload/pkg/natsjs/natstest"
	"github.com/offload-dev/offload/pkg/natsjs/remote"
)

// A dispatch's task subject and span name are made once per tool, not on
// every call; a dispatcher keeps those of at most MaxTaskNames tools and
// makes the others' on each call, the same names.
func TestTaskNamesMadeOnce(t *testing.T) {
	srv := natstest.Start(t)
	d, err := remote.NewDispatcher(remote.DispatcherConfig{Conn: srv.Conn(t), Prefix: "acme"})
	if err != nil {
		t.Fatal(err)
	}
	if subject, span := remote.TaskNames(d, "lookup"); subject != "acme.task.lookup" || span != "send acme.task.lookup" {
		t.Fatalf("names %q, %q", subject, span)
	}
	if a := testing.AllocsPerRun(100, func() { remote.TaskNames(d, "lookup") }); a != 0 {
		t.Errorf("%v allocations a dispatch for the names of a tool dispatched to before, want 0", a)
	}
	for i := range remote.MaxTaskNames + 10 {
		name := fmt.Sprintf("tool%d", i)
		if subject, span := remote.TaskNames(d, name); subject != "acme.task."+name || span != "send acme.task."+name {
			t.Fatalf("names of %s: %q, %q", name, subject, span)
		}
	}
	if subject, span := remote.TaskNames(d, "beyond"); subject != "acme.task.beyond" || span != "send acme.task.beyond" {
		t.Fatalf("names beyond the bound: %q, %q", subject, span)
	}
}
