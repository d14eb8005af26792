package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/offload-dev/offload/internal/proctest"
	"github.com/offload-dev/offload/pkg/natsjs/conformance"
	"github.com/offload-dev/offload/pkg/natsjs/natstest"
)

// napScript sleeps the seconds of its arguments, read as JSON on stdin.
const napScript = `#!/bin/sh
read -r args
s=$(printf '%s' "$args" | sed -n 's/.*"seconds": *\([0-9.-]*\).*/\1/p')
sleep "$s" || exit 1
echo slept
`

const napYAML = `tools:
  - name: nap
    description: Sleeps.
    command: ["./nap.sh"]
    timeout: 1m
    parameters:
      type: object
      properties: {seconds: {type: number}}
      required: [seconds]
`

// runBinCheck runs toolworker check and returns its exit code and output.
func runBinCheck(t *testing.T, bin string, args ...string) (int, string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, append([]string{"check"}, args...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0, stdout.String(), stderr.String()
	case errors.As(err, &ee):
		return ee.ExitCode(), stdout.String(), stderr.String()
	}
	t.Fatal(err)
	return 0, "", ""
}

// TestCheckAgainstToolworker: toolworker serving a command tool, started
// by the kit (--exec), passes every rule of toolworker check, one "ok" line
// per rule; a call that does not succeed is a FAIL line naming the rule and
// exit 1; a tool no worker serves cannot be checked (exit 1), and a check
// without --tool is a usage error.
func TestCheckAgainstToolworker(t *testing.T) {
	t.Parallel()
	bin, _ := binaries(t)
	srv := natstest.Start(t)
	dir := proctest.ToolDir(t)
	writeFile(t, filepath.Join(dir, "nap.sh"), napScript, 0o755)
	writeFile(t, filepath.Join(dir, "tools.yaml"), napYAML, 0o644)
	worker := fmt.Sprintf("%s --nats %s --config %s --ack-wait 1s --id check-1", bin, srv.URL(), filepath.Join(dir, "tools.yaml"))

	code, out, stderr := runBinCheck(t, bin, "--nats", srv.URL(), "--tool", "nap", "--args", `{"seconds":0}`, "--slow-args", `{"seconds":1.6}`, "--timeout", "20s", "--exec", worker)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if code != 0 || len(lines) != len(conformance.Rules()) {
		t.Fatalf("check: exit %d, %d lines:\n%s\nstderr: %s", code, len(lines), out, stderr)
	}
	for i, r := range conformance.Rules() {
		if lines[i] != r+": ok" {
			t.Errorf("line %d %q, want %q", i, lines[i], r+": ok")
		}
	}
	if !strings.Contains(stderr, `"msg":"toolworker started"`) {
		t.Errorf("the started worker's logs are not on stderr: %s", stderr)
	}

	code, out, _ = runBinCheck(t, bin, "--nats", srv.URL(), "--tool", "nap", "--args", `{"seconds":"x"}`, "--timeout", "20s", "--exec", worker)
	if code != exitFailed || !strings.Contains(out, "\n"+conformance.RuleRun+": FAIL: status ") {
		t.Errorf("check of a failing call: exit %d\n%s", code, out)
	}
	if code, _, stderr := runBinCheck(t, bin, "--nats", srv.URL(), "--tool", "nobody", "--timeout", "2s"); code != exitFailed || !strings.Contains(stderr, "task_nobody") {
		t.Errorf("check of a tool nobody serves: exit %d: %s", code, stderr)
	}
	if code, _, stderr := runBinCheck(t, bin, "--nats", srv.URL()); code != exitUsage || !strings.Contains(stderr, "--tool is required") {
		t.Errorf("check without --tool: exit %d: %s", code, stderr)
	}
}

// noHandBack runs its arguments and, on SIGTERM, kills them at once: a
// worker that hands nothing back.
const noHandBack = `#!/bin/sh
"$@" &
child=$!
trap 'kill -9 $child; exit 0' TERM
wait $child
`

// TestCheckFailsWorkerStops: the rules of --exec fail against a worker
// that exits on SIGTERM without handing its task back, and against one
// whose delivery limit (1) makes it refuse a redelivered task.
func TestCheckFailsWorkerStops(t *testing.T) {
	t.Parallel()
	bin, _ := binaries(t)
	srv := natstest.Start(t)
	dir := proctest.ToolDir(t)
	writeFile(t, filepath.Join(dir, "nap.sh"), napScript, 0o755)
	writeFile(t, filepath.Join(dir, "tools.yaml"), napYAML, 0o644)
	writeFile(t, filepath.Join(dir, "nohandback.sh"), noHandBack, 0o755)
	worker := fmt.Sprintf("%s %s --nats %s --config %s --ack-wait 1s --max-deliver 1 --id check-2",
		filepath.Join(dir, "nohandback.sh"), bin, srv.URL(), filepath.Join(dir, "tools.yaml"))
	code, out, stderr := runBinCheck(t, bin, "--nats", srv.URL(), "--tool", "nap", "--args", `{"seconds":0}`, "--slow-args", `{"seconds":1.6}`, "--timeout", "20s", "--exec", worker)
	if code != exitFailed {
		t.Errorf("exit %d, want %d", code, exitFailed)
	}
	for _, want := range []string{
		conformance.RuleSIGTERM + ": FAIL: exited on SIGTERM without handing back the running task",
		conformance.RuleSIGKILL + ": FAIL: status error error_type DeliveriesExhausted",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("no line %q in\n%s\nstderr: %s", want, out, stderr)
		}
	}
}
