package builtin_test

import (
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/offload-dev/offload/internal/offloadtest"
	"github.com/offload-dev/offload/pkg/builtin"
	"github.com/offload-dev/offload/pkg/tool"
)

// TestShellEnvironmentIsMinimal checks SPEC §6.5 for the built-in shell.
func TestShellEnvironmentIsMinimal(t *testing.T) {
	t.Parallel()
	vars := map[string]string{"PATH": os.Getenv("PATH"), "HOME": "/home/x", "OPENAI_API_KEY": "sk-secret",
		"NATS_URL": "nats://u:p@h", "NATS_CREDS": "/c.creds"}
	sh := toolsFor(t, builtin.Config{Root: t.TempDir(), Getenv: func(k string) string { return vars[k] }})["shell"]
	raw, err := sh.ParseArgs(`{"command":"env"}`)
	if err != nil {
		t.Fatal(err)
	}
	out, err := sh.Run(t.Context(), &tool.RunContext{TaskID: "01T", ConversationID: "01C", Attempt: 1, IdempotencyKey: "01T:1"}, raw)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, l := range strings.Split(strings.TrimSpace(out.(builtin.ShellResult).Stdout), "\n") {
		if name, _, _ := strings.Cut(l, "="); name == "PWD" || name == "SHLVL" || name == "_" {
			continue
		}
		got = append(got, l)
	}
	slices.Sort(got)
	want := []string{"HOME=/home/x", "OFFLOAD_ATTEMPT=1", "OFFLOAD_CONVERSATION_ID=01C", "OFFLOAD_IDEMPOTENCY_KEY=01T:1", "OFFLOAD_TASK_ID=01T", "PATH=" + vars["PATH"]}
	if !slices.Equal(got, want) {
		t.Errorf("environment\n got  %q\n want %q", got, want)
	}
}

// TestShellBackgroundChildKilledAtEnd: `nohup sleep 9999 &` does not outlive
// the call, and the call does not wait for it.
func TestShellBackgroundChildKilledAtEnd(t *testing.T) {
	t.Parallel()
	sh := toolsFor(t, builtin.Config{Root: t.TempDir()})["shell"]
	start := time.Now()
	out, err := call(t.Context(), t, sh, `{"command":"nohup sleep 9999 >/dev/null 2>&1 & echo $!; sleep 9999 & echo $!"}`)
	if err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 1500*time.Millisecond {
		t.Errorf("the call took %v", d)
	}
	pids := strings.Fields(out.(builtin.ShellResult).Stdout)
	if len(pids) != 2 {
		t.Fatalf("stdout %q", out.(builtin.ShellResult).Stdout)
	}
	for _, p := range pids {
		pid, _ := strconv.Atoi(p)
		offloadtest.WaitDead(t, pid)
	}
}
