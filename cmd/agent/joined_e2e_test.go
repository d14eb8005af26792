package main

import (
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/offload-dev/offload/internal/offloadtest"
)

// A second agent joined to the first one's embedded server fails its call
// promptly, with a clear error, when the first exits mid-call (the server
// goes with it), instead of waiting forever: the dispatcher gives the
// server up after ServerLostAfter (10 s).
func TestJoinedAgentFailsWhenTheServerGoes(t *testing.T) {
	t.Parallel()
	bin := agentBinary(t)
	dir := t.TempDir()
	script := sleepScript(t, dir, 120)
	start := func(name string) *piped {
		cmd := exec.CommandContext(t.Context(), bin, "run", "--json", "--model", "script:"+script, "--tools", "sleep", name)
		cmd.Dir = dir // one store: ./.offload
		p := startPiped(t, cmd)
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		return p
	}
	// waitCall reads JSON lines until the tool_call event.
	waitCall := func(p *piped) {
		t.Helper()
		for p.stdout.Scan() {
			var ev map[string]any
			if json.Unmarshal(p.stdout.Bytes(), &ev) == nil && ev["type"] == "tool_call" {
				return
			}
		}
		t.Fatalf("no tool_call event; stderr: %s", p.stderr.String())
	}
	first := start("first")
	waitCall(first)
	second := start("second")
	waitCall(second)

	// The first agent ends (SIGINT): its embedded server goes with it.
	if err := first.cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	_ = first.cmd.Wait()
	gone := time.Now()

	last := second.lastEvent()
	err := second.cmd.Wait()
	took := time.Since(gone)
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 {
		t.Fatalf("second agent: %v after %v\nstderr: %s", err, took, second.stderr.String())
	}
	// Promptly: the error says the dispatcher's ServerLostAfter gave up
	// on the server ("unreachable for 10s"), not that something else ended
	// the wait; how long it took is asserted under -tags soak.
	if last["type"] != "final" || last["status"] != "failed" || !strings.Contains(last["error"].(string), "lost the NATS server") ||
		!strings.Contains(last["error"].(string), "unreachable for") {
		t.Fatalf("final %v", last)
	}
	offloadtest.Bound(t, took, 25*time.Second, "the second agent's failure after the server went")
	t.Logf("the second agent failed: %s", last["error"])
}
