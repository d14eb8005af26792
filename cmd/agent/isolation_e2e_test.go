package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/offload-dev/offload/internal/offloadtest"
	"github.com/offload-dev/offload/internal/proc"
)

// agentAPIKey is the secret of the agent's environment in
// TestEmbeddedShellCannotReadTheAgent.
const agentAPIKey = "sk-agent-isolation-91f3c4"

// TestEmbeddedShellUnderRootAgent (issue 37): an agent run as root (the
// common case in containers) runs the approved shell calls of its embedded
// default as the tool user (default nobody), every privilege dropped: the
// call cannot read the agent's environment (OPENAI_API_KEY), which root's
// CAP_SYS_PTRACE would read despite the agent being non-dumpable, and
// writes its files in the root as that user. Before, it ran as root and
// read the key.
func TestEmbeddedShellUnderRootAgent(t *testing.T) {
	offloadtest.RequireRoot(t)
	t.Parallel()
	nobody, err := user.Lookup(proc.DefaultToolUser)
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "offload-agent-root") //nolint:usetesting // nobody must enter it: t.TempDir's parents are 0700
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o777); err != nil { // shell's root: the tool user writes there
		t.Fatal(err)
	}
	script := filepath.Join(dir, "snoop.yaml")
	command, err := json.Marshal(`cat /proc/$PPID/environ || echo unreadable; echo "uid=$(id -u) $(grep CapEff /proc/self/status | tr -d '\t')"; id -u > wrote`)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(script, []byte("turns:\n  - tool_calls: [{tool: shell, args: {command: "+string(command)+"}}]\n  - text: done\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(t.Context(), agentBinary(t), "run", "--json", "--model", "script:"+script, "--tools", "shell", "--approve", "all", "snoop")
	cmd.Dir = dir
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + dir, "OPENAI_API_KEY=" + agentAPIKey}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("agent: %v\nstderr: %s", err, stderr.String())
	}
	out := stdout.String()
	if strings.Contains(out, agentAPIKey) || strings.Contains(stderr.String(), agentAPIKey) {
		t.Errorf("the shell call read the agent's API key:\n%s", out)
	}
	for _, want := range []string{"unreadable", "uid=" + nobody.Uid + " CapEff:0000000000000000"} {
		if !strings.Contains(out, want) {
			t.Errorf("the shell call's output lacks %q:\n%s", want, out)
		}
	}
	if b, err := os.ReadFile(filepath.Join(dir, "wrote")); err != nil || strings.TrimSpace(string(b)) != nobody.Uid {
		t.Errorf("the file the shell call wrote: %q, %v", b, err)
	}
}

// TestEmbeddedShellCannotReadTheAgent (issue 30, finding 7): on the
// embedded default an approved shell call runs in the agent's in-process
// worker, as the agent's user; it cannot read the agent's environment
// (OPENAI_API_KEY) from /proc/$PPID/environ: the agent is not dumpable.
// Run as root, the test runs the agent as nobody (root reads any
// process's environment).
func TestEmbeddedShellCannotReadTheAgent(t *testing.T) {
	t.Parallel()
	dir, err := os.MkdirTemp("", "offload-agent-isolation") //nolint:usetesting // nobody must enter it: t.TempDir's parents are 0700
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o777); err != nil { // the agent, run as nobody, keeps its store there
		t.Fatal(err)
	}
	b, err := os.ReadFile(agentBinary(t))
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "agent")
	if err := os.WriteFile(bin, b, 0o755); err != nil { // nobody runs it
		t.Fatal(err)
	}
	script := filepath.Join(dir, "snoop.yaml")
	if err := os.WriteFile(script, []byte("turns:\n  - tool_calls: [{tool: shell, args: {command: 'cat /proc/$PPID/environ || echo unreadable'}}]\n  - text: done\n"), 0o644); err != nil { // nobody reads it
		t.Fatal(err)
	}
	cmd := exec.CommandContext(t.Context(), bin, "run", "--json", "--model", "script:"+script, "--tools", "shell", "--approve", "all", "snoop")
	cmd.Dir = dir
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + dir, "OPENAI_API_KEY=" + agentAPIKey}
	if os.Geteuid() == 0 {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("agent: %v\nstderr: %s", err, stderr.String())
	}
	out := stdout.String()
	if !strings.Contains(out, "unreadable") {
		t.Errorf("the shell call did not report the environment unreadable:\n%s", out)
	}
	if strings.Contains(out, agentAPIKey) || strings.Contains(stderr.String(), agentAPIKey) {
		t.Errorf("the shell call read the agent's API key:\n%s", out)
	}
}
