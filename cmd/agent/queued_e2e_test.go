package main

import (
	"bufio"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/offload-dev/offload/internal/offloadtest"
	"github.com/offload-dev/offload/pkg/natsjs/worker"
	"github.com/offload-dev/offload/pkg/tool"
)

// A call held by a paused tool is visible as queued on the agent side
// (SPEC §19, issue 42): agent run --json emits a queued event for it
// (reason paused) while it waits, agent pending lists it as queued with
// its tenant (--queued), and agent tools resume releases it: the run finishes with
// its result.
func TestPausedCallShownQueued(t *testing.T) {
	d := newDurable(t)
	job := tool.Func("job", "A job.", func(_ context.Context, rc *tool.RunContext, _ struct{}) (string, error) {
		return "done for " + rc.Tenant, nil
	})
	w, err := worker.New(worker.Config{Conn: d.nats.Conn(t), ID: "queued-worker", Tools: []*tool.Tool{job}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = w.StopAndCancel(ctx)
	})
	if out := runBinary(t, nil, "tools", "--nats", d.nats.URL(), "pause", "job", "--by", "ops"); out.code != 0 {
		t.Fatalf("pause: exit %d %s", out.code, out.stderr)
	}

	cmd := d.command("run", "--tenant", "acme", "--tools", "job", `[{"tool":"job","args":{}}]`)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	events := make(chan map[string]any, 64)
	go func() {
		defer close(events)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			var ev map[string]any
			if json.Unmarshal(sc.Bytes(), &ev) == nil {
				events <- ev
			}
		}
	}()
	var queued map[string]any
	for queued == nil {
		ev, ok := <-events
		if !ok {
			t.Fatal("the run ended before a queued event")
		}
		if ev["type"] == "queued" {
			queued = ev
		}
		if ev["type"] == "final" {
			t.Fatalf("the run ended before a queued event: %v", ev)
		}
	}
	if queued["tool"] != "job" || queued["reason"] != "paused" || !strings.HasPrefix(queued["message"].(string), "queued: tool job paused") {
		t.Errorf("queued event %v", queued)
	}
	var listed string
	offloadtest.Eventually(t, "agent pending listing the call queued", func() bool {
		out := runBinary(t, nil, "pending", "--queued", "--nats", d.nats.URL())
		listed = out.stdout
		return out.code == 0 && strings.Contains(out.stdout, " queued job (paused, tenant acme, since ")
	})
	if !strings.Contains(listed, queued["task_id"].(string)+" queued job") {
		t.Errorf("agent pending listed %q, want task %v", listed, queued["task_id"])
	}
	if out := runBinary(t, nil, "tools", "--nats", d.nats.URL(), "resume", "job", "--by", "ops"); out.code != 0 {
		t.Fatalf("resume: exit %d %s", out.code, out.stderr)
	}
	var final map[string]any
	for ev := range events {
		if ev["type"] == "final" {
			final = ev
		}
	}
	if err := cmd.Wait(); err != nil || final == nil || final["status"] != "finished" || final["output"] != "seen job:done for acme" {
		t.Errorf("the run after the resume: %v, final %v", err, final)
	}
}
