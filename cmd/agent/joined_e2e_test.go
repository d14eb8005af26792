package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// A second agent joined to the first one's embedded server fails its call
// promptly, with a clear error, when the first exits mid-call (the server
// goes with it), instead of waiting forever.
func TestJoinedAgentFailsWhenTheServerGoes(t *testing.T) {
	t.Parallel()
	bin := agentBinary(t)
	dir := t.TempDir()
	script := filepath.Join(dir, "long.yaml")
	if err := os.WriteFile(script, []byte("turns:\n  - tool_calls: [{tool: sleep, args: {seconds: 120}}]\n  - text: never\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	start := func(name string) (*exec.Cmd, *bufio.Scanner, *bytes.Buffer) {
		cmd := exec.CommandContext(t.Context(), bin, "run", "--json", "--model", "script:"+script, "--tools", "sleep", name)
		cmd.Dir = dir // one store: ./.offload
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		return cmd, bufio.NewScanner(out), &stderr
	}
	// waitCall reads JSON lines until the tool_call event.
	waitCall := func(sc *bufio.Scanner, stderr *bytes.Buffer) {
		t.Helper()
		for sc.Scan() {
			var ev map[string]any
			if json.Unmarshal(sc.Bytes(), &ev) == nil && ev["type"] == "tool_call" {
				return
			}
		}
		t.Fatalf("no tool_call event; stderr: %s", stderr.String())
	}
	first, firstOut, firstErr := start("first")
	waitCall(firstOut, firstErr)
	second, secondOut, secondErr := start("second")
	waitCall(secondOut, secondErr)

	// The first agent ends (SIGINT): its embedded server goes with it.
	if err := first.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	_ = first.Wait()
	gone := time.Now()

	var last map[string]any
	for secondOut.Scan() {
		var ev map[string]any
		if json.Unmarshal(secondOut.Bytes(), &ev) == nil {
			last = ev
		}
	}
	err := second.Wait()
	took := time.Since(gone)
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 {
		t.Fatalf("second agent: %v after %v\nstderr: %s", err, took, secondErr.String())
	}
	if last["type"] != "final" || last["status"] != "failed" || !strings.Contains(last["error"].(string), "lost the NATS server") {
		t.Fatalf("final %v", last)
	}
	if took > 25*time.Second {
		t.Errorf("the second agent took %v to fail", took)
	}
	t.Logf("the second agent failed %v after the server went: %s", took.Round(100*time.Millisecond), last["error"])
}
