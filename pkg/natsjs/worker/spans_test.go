package worker_test

import (
	"testing"

	"github.com/offload-dev/offload/internal/benchcall"
	"github.com/offload-dev/offload/pkg/natsjs/natstest"
	"github.com/offload-dev/offload/pkg/natsjs/worker"
	"github.com/offload-dev/offload/pkg/tool"
)

// The names of a task's spans are made once per tool served, at New, not
// on every task; a subject or tool the worker does not serve is named all
// the same.
func TestSpanNamesMadeOnce(t *testing.T) {
	srv := natstest.Start(t)
	w, err := worker.New(worker.Config{Conn: srv.Conn(t), ID: "w", Prefix: "acme", Tools: []*tool.Tool{benchcall.Lookup()}})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range [][4]string{
		{"acme.task.lookup", "lookup", "process acme.task.lookup", "execute_tool lookup"},
		{"acme.task.other", "lookup", "process acme.task.other", "execute_tool lookup"},
		{"acme.task.other", "other", "process acme.task.other", "execute_tool other"},
	} {
		if task, tool := worker.SpanNames(w, c[0], c[1]); task != c[2] || tool != c[3] {
			t.Errorf("%s, %s: names %q, %q; want %q, %q", c[0], c[1], task, tool, c[2], c[3])
		}
	}
	names := make([]string, 2) // the names escape, as into a span
	if a := testing.AllocsPerRun(100, func() { names[0], names[1] = worker.SpanNames(w, "acme.task.lookup", "lookup") }); a != 0 {
		t.Errorf("%v allocations for the span names of a task, want 0", a)
	}
}
