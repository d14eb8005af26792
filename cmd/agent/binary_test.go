package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/offload-dev/offload/internal/proctest"
	"github.com/offload-dev/offload/pkg/natsjs/natstest"
)

// The helpers of the end-to-end tests that drive the built agent binary:
// building it, running it to its end or starting it with its --json
// lines read as they come, reading the final event, running what a
// person would paste into a shell (with the nats CLI), and writing the
// scripts and specs the runs read.

var bins proctest.Binaries

// agentBinary builds cmd/agent once per test binary.
func agentBinary(t *testing.T) string {
	t.Helper()
	return filepath.Join(bins.Dir(t, "."), "agent")
}

// exitCode is the exit code of a process that ended with err (from Run or
// Wait); an error that is not an exit fails the test.
func exitCode(t *testing.T, err error) int {
	t.Helper()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return 0
}

type runOutput struct {
	stdout, stderr string
	code           int
}

// runBinary runs the agent binary to its end in a fresh directory.
func runBinary(t *testing.T, env []string, args ...string) runOutput {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), agentBinary(t), args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Dir = t.TempDir()
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	code := exitCode(t, cmd.Run())
	return runOutput{stdout.String(), stderr.String(), code}
}

// plain runs the agent binary in dir with args and no --json; it returns
// the exit code, stdout and stderr.
func plain(t *testing.T, dir string, env []string, args ...string) (int, string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, agentBinary(t), args...)
	cmd.Dir = dir
	cmd.Env = append(append(os.Environ(), "NATS_URL="), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	code := exitCode(t, cmd.Run())
	return code, stdout.String(), stderr.String()
}

// piped is an agent process started with its stdout piped and its stderr
// kept.
type piped struct {
	cmd    *exec.Cmd
	stdout *bufio.Scanner
	stderr *bytes.Buffer
}

// startPiped starts cmd with its stdout piped (read it with events or
// stdout) and its stderr kept in a buffer.
func startPiped(t *testing.T, cmd *exec.Cmd) *piped {
	t.Helper()
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	p := &piped{cmd: cmd, stdout: bufio.NewScanner(stdout), stderr: &bytes.Buffer{}}
	cmd.Stderr = p.stderr
	start(t, cmd)
	return p
}

// start starts cmd; a test that ends without waiting for it (t.Fatal, or
// t.Skip when the nats CLI is missing) kills and reaps it, so that neither
// the process nor os/exec's context watcher outlives the test.
func start(t *testing.T, cmd *exec.Cmd) {
	t.Helper()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
}

// events reads the --json lines to the end of stdout, calling each (when
// not nil) with every event in turn; a line that is not JSON fails the
// test. It returns the last event.
func (p *piped) events(t *testing.T, each func(ev map[string]any)) map[string]any {
	t.Helper()
	var last map[string]any
	for p.stdout.Scan() {
		var ev map[string]any
		if err := json.Unmarshal(p.stdout.Bytes(), &ev); err != nil {
			t.Fatalf("not JSON: %q", p.stdout.Text())
		}
		last = ev
		if each != nil {
			each(ev)
		}
	}
	return last
}

// lastEvent reads stdout to its end and returns the last line that is a
// JSON event, skipping any that is not.
func (p *piped) lastEvent() map[string]any {
	var last map[string]any
	for p.stdout.Scan() {
		var ev map[string]any
		if json.Unmarshal(p.stdout.Bytes(), &ev) == nil {
			last = ev
		}
	}
	return last
}

// lastLine returns the final event, which --json prints as the last line
// of stdout.
func lastLine(t *testing.T, stdout string) map[string]any {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	var final map[string]any
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &final); err != nil || final["type"] != "final" {
		t.Fatalf("last stdout line is not a final event: %q", stdout)
	}
	return final
}

// natsCLIPath is the nats CLI on PATH; without it the test is skipped, or
// fails when OFFLOAD_REQUIRE_NATS_CLI is set.
func natsCLIPath(t *testing.T) string { return natstest.NATSCLI(t) }

// sh runs line with sh -c, as a person pasting it would, with the nats CLI
// on PATH.
func sh(t *testing.T, dir, line string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "sh", "-c", line)
	cmd.Dir = dir
	path := os.Getenv("PATH")
	if p, err := exec.LookPath("nats"); err == nil {
		path = filepath.Dir(p) + ":" + path
	}
	cmd.Env = append(os.Environ(), "PATH="+path, "NATS_URL=")
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode(), string(out)
	} else if err != nil {
		t.Fatal(err)
	}
	return 0, string(out)
}

// writeFile writes content to name in dir and returns its path.
func writeFile(t *testing.T, dir, name, content string) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// sleepScript writes a model script (for --model script:PATH) that calls
// sleep for seconds, then answers "never", and returns its path.
func sleepScript(t *testing.T, dir string, seconds int) string {
	t.Helper()
	return writeFile(t, dir, "long.yaml", "turns:\n  - tool_calls: [{tool: sleep, args: {seconds: "+strconv.Itoa(seconds)+"}}]\n  - text: never\n")
}

// askHumanSpec writes a spec declaring the external tool ask_human and
// returns its path.
func askHumanSpec(t *testing.T, dir string) string {
	t.Helper()
	return writeFile(t, dir, "spec.yaml", `external_tools:
  - name: ask_human
    description: Ask a person.
    parameters: {type: object, properties: {question: {type: string}}, required: [question]}
`)
}

// waited is how a run with --approve wait ended.
type waited struct {
	conv, task string         // the conversation and the announced approval's task
	last       map[string]any // the last --json event
	err        error          // the process's end
	stderr     string
}

// runApproveWait runs the deployProd prompt with --approve wait --wait 1m
// (and the flags of more) and calls decide once the run announces its
// approval (its deferred_tool_requests event); it returns when the
// process has ended.
func (d *durable) runApproveWait(decide func(conv, task string), more ...string) waited {
	d.t.Helper()
	cmd := d.command(append(append([]string{"run", "--approve", "wait", "--wait", "1m"}, more...), deployProd)...)
	p := startPiped(d.t, cmd)
	var w waited
	w.last = p.events(d.t, func(ev map[string]any) {
		w.conv, _ = ev["conversation_id"].(string)
		if ev["type"] == "deferred_tool_requests" {
			for _, id := range ev["task_ids"].(map[string]any) {
				w.task = id.(string)
			}
			decide(w.conv, w.task)
		}
	})
	w.err = cmd.Wait()
	w.stderr = p.stderr.String()
	return w
}
