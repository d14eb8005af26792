package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/offload-dev/offload/pkg/limits"
	"github.com/offload-dev/offload/pkg/natsjs"
	"github.com/offload-dev/offload/pkg/natsjs/natstest"
	"github.com/offload-dev/offload/pkg/natsjs/worker"
	"github.com/offload-dev/offload/pkg/tool"
)

// agent tools lists each tool with its workers and limits, pauses and
// resumes it (the listing says so, with who did it), lists the dead
// letters; an unknown subcommand is a usage error.
func TestBinaryTools(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	if err := natsjs.Provision(t.Context(), srv.JetStream(t), natsjs.ProvisionOptions{}); err != nil {
		t.Fatal(err)
	}
	job := tool.Func("job", "A job.", func(context.Context, *tool.RunContext, struct{}) (string, error) { return "done", nil },
		tool.Limited(&limits.Limits{MaxInFlight: 2, Key: "tenant"}))
	w, err := worker.New(worker.Config{Conn: srv.Conn(t), ID: "w1", Tools: []*tool.Tool{job}})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = w.Stop(ctx)
	})
	tools := func(args ...string) runOutput {
		t.Helper()
		return runBinary(t, nil, append([]string{"tools", "--nats", srv.URL()}, args...)...)
	}
	line := func(out runOutput) string {
		t.Helper()
		for _, l := range strings.Split(out.stdout, "\n") {
			if strings.HasPrefix(l, "job ") {
				return l
			}
		}
		t.Fatalf("no line of tool job: exit %d stdout %q stderr %q", out.code, out.stdout, out.stderr)
		return ""
	}
	if l := line(tools()); !strings.Contains(l, " w1 ") || !strings.Contains(l, "max_in_flight 2 per tenant") || !strings.HasSuffix(l, "running") {
		t.Errorf("listed %q", l)
	}
	if out := tools("pause", "job", "--by", "ops@example"); out.code != 0 || !strings.Contains(out.stdout, "tool job paused until resumed") {
		t.Fatalf("pause: exit %d stdout %q stderr %q", out.code, out.stdout, out.stderr)
	}
	if l := line(tools("list")); !strings.HasSuffix(l, "paused until resumed by ops@example") {
		t.Errorf("listed %q after the pause", l)
	}
	if out := tools("resume", "job", "--by", "ops@example"); out.code != 0 {
		t.Fatalf("resume: exit %d stderr %q", out.code, out.stderr)
	}
	if l := line(tools()); !strings.HasSuffix(l, "running") {
		t.Errorf("listed %q after the resume", l)
	}
	if out := tools("dead", "--json"); out.code != 0 || strings.TrimSpace(out.stdout) != "[]" {
		t.Errorf("dead: exit %d stdout %q stderr %q", out.code, out.stdout, out.stderr)
	}
	if out := tools("bogus"); out.code != 2 || !strings.Contains(out.stderr, `unknown subcommand "bogus"`) {
		t.Errorf("bogus: exit %d stderr %q", out.code, out.stderr)
	}
}
