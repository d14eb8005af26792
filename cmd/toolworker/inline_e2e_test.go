package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/offload-dev/offload/internal/proctest"
	"github.com/offload-dev/offload/pkg/natsjs"
	"github.com/offload-dev/offload/pkg/natsjs/natstest"
	"github.com/offload-dev/offload/pkg/protocol"
)

// The agent's inline remote calls end: a worker that takes a task and
// never answers cannot make `agent run` wait past --call-timeout (and a 5 s
// grace), and SIGTERM while a call runs suspends the run at once, the call
// kept for the resume (SPEC §6.1).

// agentRun is an agent process started with its --json events read as
// they come.
type agentRun struct {
	cmd    *exec.Cmd
	events chan map[string]any // closed at the end of stdout
	stderr *bytes.Buffer
	done   chan struct{} // closed when the process has exited
	err    error
}

func startAgent(t *testing.T, bin, dir string, args ...string) *agentRun {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	t.Cleanup(cancel)
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "NATS_URL=", "OPENAI_API_KEY=")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	r := &agentRun{cmd: cmd, events: make(chan map[string]any, 256), stderr: &bytes.Buffer{}, done: make(chan struct{})}
	cmd.Stderr = r.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		defer close(r.done)
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			var ev map[string]any
			if json.Unmarshal(sc.Bytes(), &ev) == nil {
				r.events <- ev
			}
		}
		close(r.events)
		r.err = cmd.Wait()
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-r.done
	})
	return r
}

// next returns the next event of type typ, failing the test when stdout
// ends first.
func (r *agentRun) next(t *testing.T, typ string) map[string]any {
	t.Helper()
	for ev := range r.events {
		if ev["type"] == typ {
			return ev
		}
	}
	t.Fatalf("no %s event; stderr:\n%s", typ, r.stderr)
	return nil
}

// wait waits for the process to exit and returns its exit code.
func (r *agentRun) wait(t *testing.T) int {
	t.Helper()
	for range r.events {
	}
	<-r.done
	var ee *exec.ExitError
	if errors.As(r.err, &ee) {
		return ee.ExitCode()
	} else if r.err != nil {
		t.Fatal(r.err)
	}
	return 0
}

// A worker (a third-party one, played by the test) advertises a tool,
// takes its task, acks it and never answers: `agent run --call-timeout 3s`
// ends in well under 15 s, the model is shown DeadlineExceeded, and a cancel
// is stored for the task.
func TestAgentCallTimeoutEndsAnUnansweredCall(t *testing.T) {
	t.Parallel()
	_, agentBin := binaries(t)
	srv := natstest.Start(t)
	js := srv.JetStream(t)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if err := natsjs.Provision(ctx, js, natsjs.ProvisionOptions{}); err != nil {
		t.Fatal(err)
	}
	cons, err := natsjs.EnsureTaskConsumer(ctx, js, "silent", natsjs.ProvisionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	kv, err := natsjs.EnsureRegistry(ctx, js, natsjs.ProvisionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	entry := fmt.Sprintf(`{"name":"silent","description":"Never answers.","parameters":{"type":"object","properties":{}},"metadata":{},"requires_approval":false,"worker":"rogue","expires_at":%q}`,
		time.Now().Add(10*time.Minute).UTC().Format(time.RFC3339Nano))
	if _, err := kv.Put(ctx, "silent.rogue", []byte(entry)); err != nil {
		t.Fatal(err)
	}
	taken := make(chan protocol.Task, 1)
	go func() {
		batch, err := cons.Fetch(1, jetstream.FetchMaxWait(time.Minute))
		if err != nil {
			return
		}
		for m := range batch.Messages() {
			var task protocol.Task
			_ = json.Unmarshal(m.Data(), &task)
			_ = m.Ack() // taken, and never answered
			taken <- task
		}
	}()

	start := time.Now()
	r := startAgent(t, agentBin, t.TempDir(), "run", "--nats", srv.URL(), "--model", "test", "--tools", "silent", "--call-timeout", "3s", "--json", "call it")
	var task protocol.Task
	select {
	case task = <-taken:
	case <-ctx.Done():
		t.Fatalf("the task was never dispatched; stderr:\n%s", r.stderr)
	}
	res := r.next(t, "tool_result")
	if code := r.wait(t); code != 0 {
		t.Fatalf("exit %d; stderr:\n%s", code, r.stderr)
	}
	took := time.Since(start)
	t.Logf("agent run ended %s after its start (call timeout 3s + 5s grace)", took.Round(10*time.Millisecond))
	if took > 15*time.Second {
		t.Errorf("the run took %s, want < 15s", took)
	}
	if c, _ := res["content"].(string); res["tool"] != "silent" || !strings.Contains(c, "DeadlineExceeded") {
		t.Errorf("tool_result %v, want DeadlineExceeded shown to the model", res)
	}
	// The cancel is stored, so a worker still running it stops.
	out, err := exec.CommandContext(ctx, natsCLI(t), "--server", srv.URL(), "sub", "tools.cancel."+task.ConversationID+"."+task.TaskID+"."+task.Tool, "--all", "--count", "1", "--raw").Output()
	if err != nil {
		t.Fatalf("nats sub: %v", err)
	}
	var c protocol.Cancel
	if err := json.Unmarshal(bytes.TrimSpace(out), &c); err != nil || c.TaskID != task.TaskID {
		t.Errorf("stored cancel %q: %v", out, err)
	}
}

const sixSecondsScript = `#!/bin/sh
# Counts its runs, takes 6 s, answers.
echo run >> COUNT_FILE
sleep 6
echo "slow done"
`

// SIGTERM 1 s into a 6 s inline call: the agent exits 3 within 3 s, the
// call still running on its worker and kept in the pending record; the
// resume delivers its result once, and the tool ran once.
func TestAgentSIGTERMDuringInlineCallSuspends(t *testing.T) {
	t.Parallel()
	twBin, agentBin := binaries(t)
	srv := natstest.Start(t)
	dir := proctest.ToolDir(t)
	count := filepath.Join(dir, "runs")
	writeFile(t, filepath.Join(dir, "slow.sh"), strings.Replace(sixSecondsScript, "COUNT_FILE", count, 1), 0o755)
	writeFile(t, filepath.Join(dir, "tools.yaml"), `tools:
  - name: slow
    description: Takes six seconds.
    command: ["./slow.sh"]
    timeout: 1m
    parameters: {type: object, properties: {}}
`, 0o644)
	writeFile(t, filepath.Join(dir, "run.yaml"), "turns:\n  - tool_calls: [{tool: slow}]\n  - text: never reached\n", 0o644)
	writeFile(t, filepath.Join(dir, "resume.yaml"), "turns:\n  - text: all done\n", 0o644)
	startWorker(t, twBin, "--nats", srv.URL(), "--config", filepath.Join(dir, "tools.yaml"), "--id", "w1")

	r := startAgent(t, agentBin, dir, "run", "--nats", srv.URL(), "--model", "script:run.yaml", "--json", "go slow")
	call := r.next(t, "tool_call")
	time.Sleep(time.Second) // the scenario: SIGTERM one second into the call
	sent := time.Now()
	if err := r.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	final := r.next(t, "final")
	code := r.wait(t)
	took := time.Since(sent)
	t.Logf("agent exited %d, %s after SIGTERM", code, took.Round(time.Millisecond))
	if code != 3 || final["status"] != "paused" {
		t.Fatalf("exit %d, final %v; stderr:\n%s", code, final, r.stderr)
	}
	if took > 3*time.Second {
		t.Errorf("suspended %s after SIGTERM, want within 3s", took)
	}
	pending, _ := final["pending"].([]any)
	if len(pending) != 1 {
		t.Fatalf("pending %v, want the running call", final["pending"])
	}
	p := pending[0].(map[string]any)
	if p["kind"] != "background" || p["tool"] != "slow" || p["task_id"] != call["task_id"] {
		t.Errorf("pending %v, want the call's task %v kept as background", p, call["task_id"])
	}
	conv, _ := final["conversation_id"].(string)

	r2 := startAgent(t, agentBin, dir, "resume", "--nats", srv.URL(), "--model", "script:resume.yaml", "--json", "--conversation", conv)
	final2 := r2.next(t, "final")
	if code := r2.wait(t); code != 0 || final2["output"] != "all done" {
		t.Fatalf("resume: exit %d final %v; stderr:\n%s", code, final2, r2.stderr)
	}
	hist, err := exec.Command(agentBin, "history", "--nats", srv.URL(), "--conversation", conv).Output()
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(hist), "completed.\\nResult: slow done"); n != 1 {
		t.Errorf("the result reached the history %d times, want once:\n%s", n, hist)
	}
	runs, err := os.ReadFile(count)
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(runs), "run"); n != 1 {
		t.Errorf("the tool ran %d times, want once", n)
	}
}
