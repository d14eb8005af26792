package main

import (
	"bytes"
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

	"github.com/offload-dev/offload/internal/proctest"
	"github.com/offload-dev/offload/pkg/natsjs/natstest"
	"github.com/offload-dev/offload/pkg/natsjs/remote"
	"github.com/offload-dev/offload/pkg/protocol"
)

// These tests build the binaries and drive them as an operator would, with
// the real nats CLI (natscli v0.5.0, installed by `make test` into .bin/).

var bins proctest.Binaries

// binaries builds cmd/toolworker and cmd/agent once for the package's tests.
func binaries(t *testing.T) (toolworker, agent string) {
	t.Helper()
	dir := bins.Dir(t, "../toolworker", "../agent")
	return filepath.Join(dir, "toolworker"), filepath.Join(dir, "agent")
}

// natsCLI returns the path of the nats CLI (see natstest.NATSCLI).
func natsCLI(t *testing.T) string { return natstest.NATSCLI(t) }

// commandFIFO makes a FIFO at path that the tool user writes (the
// tests' commands say they started through one).
func commandFIFO(t *testing.T, path string) {
	t.Helper()
	if err := syscall.Mkfifo(path, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, 0o666); err != nil {
		t.Fatal(err)
	}
}

func writeFile(t *testing.T, path, content string, mode os.FileMode) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
}

// startWorker starts toolworker and waits for its "toolworker started" log
// line.
func startWorker(t *testing.T, bin string, args ...string) *proctest.Process {
	t.Helper()
	p := proctest.StartProcess(t, bin, args...)
	p.WaitLog(t, `"msg":"toolworker started"`, 30*time.Second)
	return p
}

const shoutScript = `#!/bin/sh
# Reads the arguments as JSON on stdin and answers with a line of text.
read -r args
echo "heard: $args"
`

const brokenScript = `#!/bin/sh
echo "secret stack trace: password=hunter2" >&2
exit 1
`

const configYAML = `tools:
  - name: shout
    description: Repeat the arguments.
    command: ["./shout.sh"]
    timeout: 10s
    parameters:
      type: object
      properties: {text: {type: string}}
      required: [text]
  - name: broken
    description: Always fails.
    command: ["./broken.sh"]
    parameters: {type: object, properties: {}}
`

func TestToolworkerWithNatsCLI(t *testing.T) {
	t.Parallel()
	twBin, _ := binaries(t)
	nats := natsCLI(t)
	srv := natstest.Start(t)
	dir := proctest.ToolDir(t)
	writeFile(t, filepath.Join(dir, "shout.sh"), shoutScript, 0o755)
	writeFile(t, filepath.Join(dir, "broken.sh"), brokenScript, 0o755)
	writeFile(t, filepath.Join(dir, "tools.yaml"), configYAML, 0o644)
	w := startWorker(t, twBin, "--nats", srv.URL(), "--config", filepath.Join(dir, "tools.yaml"), "--id", "e2e-1")

	conv := protocol.NewID()
	shoutID, brokenID := protocol.NewID(), protocol.NewID()
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	pub := func(subject, body string, headers ...string) {
		args := []string{"--server", srv.URL(), "pub", subject, body}
		for _, h := range headers {
			args = append(args, "-H", h)
		}
		if out, err := exec.CommandContext(ctx, nats, args...).CombinedOutput(); err != nil {
			t.Fatalf("nats pub: %v\n%s", err, out)
		}
	}
	pub("tools.task.shout", fmt.Sprintf(`{"task_id":%q,"tool":"shout","args":{"text":"hello"},"conversation_id":%q}`, shoutID, conv), "Nats-Msg-Id:"+shoutID)
	pub("tools.task.broken", fmt.Sprintf(`{"task_id":%q,"tool":"broken","args":{},"conversation_id":%q}`, brokenID, conv), "Nats-Msg-Id:"+brokenID)

	// The results stream keeps results, so nats sub --all reads them whenever
	// they were published.
	out, err := exec.CommandContext(ctx, nats, "--server", srv.URL(), "sub", "tools.result."+conv+".>", "--all", "--count", "2", "--raw").Output()
	if err != nil {
		t.Fatalf("nats sub: %v\nworker logs:\n%s", err, w.Logs())
	}
	results := map[string]protocol.Result{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		var r protocol.Result
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("result line %q: %v", line, err)
		}
		results[r.TaskID] = r
	}
	shout := results[shoutID]
	var content string
	_ = json.Unmarshal(shout.Content, &content)
	if shout.Status != protocol.StatusOK || content != `heard: {"text":"hello"}` || shout.Worker != "e2e-1" {
		t.Errorf("shout result = %+v (content %q)", shout, content)
	}
	broken := results[brokenID]
	if broken.Status != protocol.StatusError || broken.ErrorType != protocol.ErrorCommandFailed {
		t.Errorf("broken result = %+v", broken)
	}
	raw, _ := json.Marshal(broken)
	if bytes.Contains(raw, []byte("hunter2")) || bytes.Contains(raw, []byte("secret")) {
		t.Errorf("the command's stderr leaked into the result: %s", raw)
	}
	if !strings.Contains(w.Logs(), "hunter2") {
		t.Errorf("stderr of the failed command should be logged by the worker")
	}
}

// slowTool writes a directory with script as slow.sh, a tools.yaml
// offering it as the tool slow (described by description, with a 1 m
// timeout), and the FIFO started.fifo the script announces itself on.
func slowTool(t *testing.T, script, description string) (dir, fifo string) {
	t.Helper()
	dir = proctest.ToolDir(t)
	writeFile(t, filepath.Join(dir, "slow.sh"), script, 0o755)
	writeFile(t, filepath.Join(dir, "tools.yaml"), `tools:
  - name: slow
    description: `+description+`
    command: ["./slow.sh"]
    timeout: 1m
`, 0o644)
	fifo = filepath.Join(dir, "started.fifo")
	commandFIFO(t, fifo)
	return dir, fifo
}

func TestAgentUsesToolworkerTools(t *testing.T) {
	t.Parallel()
	twBin, agentBin := binaries(t)
	srv := natstest.Start(t)
	dir := proctest.ToolDir(t)
	writeFile(t, filepath.Join(dir, "shout.sh"), shoutScript, 0o755)
	writeFile(t, filepath.Join(dir, "broken.sh"), brokenScript, 0o755)
	writeFile(t, filepath.Join(dir, "tools.yaml"), configYAML, 0o644)
	startWorker(t, twBin, "--nats", srv.URL(), "--config", filepath.Join(dir, "tools.yaml"), "--id", "e2e-agent")

	cmd := exec.CommandContext(t.Context(), agentBin, "run", "--nats", srv.URL(), "--model", "test", "--tools", "shout,broken", "--json", "use the tools")
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("agent: %v\nstderr: %s", err, stderr.String())
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	var final struct {
		Type, Status, Output string
	}
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &final); err != nil {
		t.Fatal(err)
	}
	if final.Type != "final" || final.Status != "finished" {
		t.Fatalf("final = %+v", final)
	}
	// The test model answers with a line per tool saying what it returned.
	want := "I called 2 tools.\n- broken returned {\"error\":\"CommandFailed\"}\n- shout returned heard: {\"text\":\"a\"}"
	if final.Output != want {
		t.Errorf("output %q, want %q (the model must see only the error type of broken)", final.Output, want)
	}
	if _, err := os.Stat(filepath.Join(dir, ".offload")); err == nil {
		t.Errorf("with --nats the agent must not start an embedded server")
	}
}

// slowResult is what callSlow's call returned.
type slowResult struct {
	res protocol.Result
	err error
}

// callSlow starts a dispatcher on srv and calls the tool "slow" once in
// the background; the outcome arrives on the channel. The dispatcher stops
// when the test ends.
func callSlow(ctx context.Context, t *testing.T, srv *natstest.Server) <-chan slowResult {
	t.Helper()
	d, err := remote.NewDispatcher(remote.DispatcherConfig{Conn: srv.Conn(t)})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Stop(context.Background()) })
	done := make(chan slowResult, 1)
	go func() {
		res, err := d.Call(ctx, protocol.Task{TaskID: protocol.NewID(), Tool: "slow", Args: json.RawMessage(`{}`), ConversationID: protocol.NewID()})
		done <- slowResult{res, err}
	}()
	return done
}
