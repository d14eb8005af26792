package main

import (
	"bufio"
	"context"
	"encoding/json"
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

// effectScript counts its own runs: it appends its idempotency key to
// runs.log, announces itself on a FIFO (its toolworker's PID), then waits
// for a release file.
//
// A SIGKILLed toolworker leaves its command running (nothing kills an
// orphan of a worker killed outright): the script also ends when the
// test's directory is gone.
const effectScript = `#!/bin/sh
d="$(dirname "$0")"
echo "$OFFLOAD_IDEMPOTENCY_KEY" >> "$d/runs.log"
echo "$PPID" > "$d/started.fifo"
while [ ! -f "$d/release" ] && [ -d "$d" ]; do sleep 0.05; done
echo "finished"
`

// effectTool writes a directory with effectScript as the command tool
// slow (idempotent: true when idempotent), and its FIFO.
func effectTool(t *testing.T, idempotent bool) (dir, fifo string) {
	t.Helper()
	dir = proctest.ToolDir(t)
	writeFile(t, filepath.Join(dir, "slow.sh"), effectScript, 0o755)
	writeFile(t, filepath.Join(dir, "tools.yaml"), fmt.Sprintf(`tools:
  - name: slow
    description: Counts its runs, waits to be released.
    command: ["./slow.sh"]
    timeout: 1m
    idempotent: %v
`, idempotent), 0o644)
	fifo = filepath.Join(dir, "started.fifo")
	commandFIFO(t, fifo)
	return dir, fifo
}

// runs returns the idempotency keys the tool's runs wrote, one per run.
func runs(t *testing.T, dir string) []string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, "runs.log"))
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return strings.Fields(string(data))
}

// TestKilledWorkerEffect: a command tool's toolworker is SIGKILLed mid-run
// (two replicas, ack wait 1 s). With idempotent: true the other replica
// runs it again, and the tool sees the same OFFLOAD_IDEMPOTENCY_KEY; without
// it the tool is not run again, and the call is answered approval_required
// with the unknown effect's metadata, naming the killed worker (SPEC §13).
func TestKilledWorkerEffect(t *testing.T) {
	t.Parallel()
	for _, idempotent := range []bool{true, false} {
		t.Run(fmt.Sprintf("idempotent=%v", idempotent), func(t *testing.T) {
			t.Parallel()
			twBin, _ := binaries(t)
			srv := natstest.Start(t)
			dir, fifo := effectTool(t, idempotent)
			args := []string{"--nats", srv.URL(), "--config", filepath.Join(dir, "tools.yaml"), "--ack-wait", "1s"}
			w1 := startWorker(t, twBin, append(args, "--id", "w1")...)
			w2 := startWorker(t, twBin, append(args, "--id", "w2")...)
			byPID := map[int]*proctest.Process{w1.Pid(): w1, w2.Pid(): w2}
			ids := map[*proctest.Process]string{w1: "w1", w2: "w2"}

			// Keep the FIFO open for reading so that writers never block.
			f, err := os.OpenFile(fifo, os.O_RDWR, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			starts := make(chan int, 4)
			go func() {
				sc := bufio.NewScanner(f)
				for sc.Scan() {
					var pid int
					_, _ = fmt.Sscan(sc.Text(), &pid) // a line that is not a PID reads as 0
					starts <- pid
				}
			}()

			ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
			defer cancel()
			done := callSlow(ctx, t, srv)
			var first int
			select {
			case first = <-starts:
			case <-ctx.Done():
				t.Fatal("the task never started")
			}
			victim, ok := byPID[first]
			if !ok {
				t.Fatalf("task started under unknown pid %d", first)
			}
			if err := victim.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			<-victim.Done()
			survivor := "w1"
			if victim == w1 {
				survivor = "w2"
			}
			if idempotent {
				select {
				case second := <-starts:
					if second == first || byPID[second] == nil {
						t.Fatalf("run again under pid %d, first ran on %d", second, first)
					}
				case <-ctx.Done():
					t.Fatal("the idempotent tool was not run again")
				}
				writeFile(t, filepath.Join(dir, "release"), "", 0o644)
			}
			r := <-done
			if r.err != nil {
				t.Fatal(r.err)
			}
			keys := runs(t, dir)
			if idempotent {
				var content string
				_ = json.Unmarshal(r.res.Content, &content)
				if r.res.Status != protocol.StatusOK || content != "finished" || r.res.Worker != survivor {
					t.Fatalf("result = %+v", r.res)
				}
				if len(keys) != 2 || keys[0] != keys[1] || !strings.HasSuffix(keys[0], ":0") {
					t.Fatalf("runs with keys %q: want two runs with the same key <task>:0", keys)
				}
				return
			}
			if r.res.Status != protocol.StatusApprovalRequired || r.res.Worker != survivor ||
				r.res.Metadata["offload.effect"] != "unknown" || r.res.Metadata["worker"] != ids[victim] || r.res.Metadata["started_at"] == nil {
				t.Fatalf("result = %+v, want approval_required with offload.effect unknown, worker %s", r.res, ids[victim])
			}
			if len(keys) != 1 {
				t.Fatalf("runs with keys %q: the tool ran again", keys)
			}
		})
	}
}

// TestStoredResultNotRunAgain: a task whose result was stored before its
// worker died (the ledger entry started, the delivery never acknowledged)
// is answered from the stored result by the next toolworker, without
// running the tool.
func TestStoredResultNotRunAgain(t *testing.T) {
	t.Parallel()
	twBin, _ := binaries(t)
	srv := natstest.Start(t)
	dir, _ := effectTool(t, false)
	js, err := jetstream.New(srv.Conn(t))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	if err := natsjs.Provision(ctx, js, natsjs.ProvisionOptions{}); err != nil {
		t.Fatal(err)
	}
	conv, task := protocol.NewID(), protocol.NewID()
	// What a worker killed after storing the result leaves behind.
	if _, err := js.Publish(ctx, "tools.result."+conv+"."+task+".slow", []byte(`{"content":"stored","worker":"died"}`),
		jetstream.WithMsgID(protocol.ResultMsgID(task, 0))); err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(ctx, "tools_effects")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Create(ctx, natsjs.EffectKey("slow", task, 0), []byte(`{"started":{"worker":"died","at":"2026-01-01T00:00:00Z"}}`)); err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(ctx, "tools.task.slow", []byte(fmt.Sprintf(`{"task_id":%q,"tool":"slow","args":{},"conversation_id":%q}`, task, conv)),
		jetstream.WithMsgID(task)); err != nil {
		t.Fatal(err)
	}
	w := startWorker(t, twBin, "--nats", srv.URL(), "--config", filepath.Join(dir, "tools.yaml"), "--ack-wait", "1s", "--id", "next")
	w.WaitLog(t, "attempt answered before: acknowledged without running", 30*time.Second)
	if keys := runs(t, dir); len(keys) != 0 {
		t.Fatalf("the tool ran: %q", keys)
	}
	s, err := js.Stream(ctx, "TOOLS_RESULTS")
	if err != nil {
		t.Fatal(err)
	}
	if n := s.CachedInfo().State.Msgs; n != 1 {
		t.Fatalf("%d results stored, want the one", n)
	}
}

// TestUnknownEffectReachesAPersonAndTheModel: agent run calls a command
// tool (not idempotent) whose toolworker is SIGKILLed mid-run; the next
// toolworker does not run it again, the run pauses with the call pending
// as an approval (agent pending lists it), and a denial on agent resume
// reaches the model as SPEC §13's text.
func TestUnknownEffectReachesAPersonAndTheModel(t *testing.T) {
	t.Parallel()
	twBin, agentBin := binaries(t)
	srv := natstest.Start(t)
	dir, fifo := effectTool(t, false)
	writeFile(t, filepath.Join(dir, "run.yaml"), "turns:\n  - tool_calls: [{tool: slow}]\n  - text: never reached\n", 0o644)
	writeFile(t, filepath.Join(dir, "resume.yaml"), "turns:\n  - text: told\n", 0o644)
	args := []string{"--nats", srv.URL(), "--config", filepath.Join(dir, "tools.yaml"), "--ack-wait", "1s"}
	w1 := startWorker(t, twBin, append(args, "--id", "w1")...)
	f, err := os.OpenFile(fifo, os.O_RDWR, 0) // never blocks the script's write
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	started := make(chan struct{}, 4)
	go func() {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			started <- struct{}{}
		}
	}()

	r := startAgent(t, agentBin, dir, "run", "--nats", srv.URL(), "--model", "script:run.yaml", "--approve", "defer", "--json", "go")
	call := r.next(t, "tool_call")
	select {
	case <-started:
	case <-time.After(30 * time.Second):
		t.Fatalf("the tool never started; worker logs:\n%s", w1.Logs())
	}
	if err := w1.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-w1.Done()
	startWorker(t, twBin, append(args, "--id", "w2")...)
	final := r.next(t, "final")
	if code := r.wait(t); code != 3 || final["status"] != "paused" {
		t.Fatalf("exit %d, final %v; stderr:\n%s", code, final, r.stderr)
	}
	conv, _ := final["conversation_id"].(string)
	task, _ := call["task_id"].(string)
	out, err := exec.Command(agentBin, "pending", "--nats", srv.URL(), "--conversation", conv).Output()
	if err != nil {
		t.Fatalf("agent pending: %v", err)
	}
	if !strings.Contains(string(out), task+" approval slow") {
		t.Fatalf("agent pending does not list the call %s as an approval:\n%s", task, out)
	}

	r2 := startAgent(t, agentBin, dir, "resume", "--nats", srv.URL(), "--model", "script:resume.yaml", "--json", "--conversation", conv, "--deny-task", task)
	final2 := r2.next(t, "final")
	if code := r2.wait(t); code != 0 || final2["output"] != "told" {
		t.Fatalf("resume: exit %d final %v; stderr:\n%s", code, final2, r2.stderr)
	}
	hist, err := exec.Command(agentBin, "history", "--nats", srv.URL(), "--conversation", conv).Output()
	if err != nil {
		t.Fatal(err)
	}
	want := "The outcome of tool 'slow' is unknown: its worker stopped while running it, and it was not run again."
	if !strings.Contains(string(hist), want) {
		t.Errorf("the history lacks the denial text %q:\n%s", want, hist)
	}
	if keys := runs(t, dir); len(keys) != 1 {
		t.Errorf("the tool ran %d times (%q), want once", len(keys), keys)
	}
}
