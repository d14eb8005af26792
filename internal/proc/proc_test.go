//go:build unix

package proc_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/offload-dev/offload/internal/offloadtest"
	"github.com/offload-dev/offload/internal/proc"
)

func TestRunKillsBackgroundChildOnExit(t *testing.T) {
	t.Parallel()
	// The child keeps stdout: without the group kill, Run would wait for it.
	cmd := exec.Command("/bin/sh", "-c", `nohup sleep 9999 >/dev/null 2>&1 & echo $!; sleep 9999 & echo $!`)
	var out, errb bytes.Buffer
	start := time.Now()
	if err := proc.Run(cmd, &out, &errb, 5*time.Second); err != nil {
		t.Fatalf("run: %v (stderr %q)", err, errb.String())
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("run took %v: the held stdout was not released by the group kill", d)
	}
	lines := strings.Fields(out.String())
	if len(lines) != 2 {
		t.Fatalf("stdout %q", out.String())
	}
	for _, l := range lines {
		pid, err := strconv.Atoi(l)
		if err != nil {
			t.Fatal(err)
		}
		offloadtest.WaitDead(t, pid)
	}
}

func TestRunKillsGroupOnCancel(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	dir := t.TempDir()
	fifo := filepath.Join(dir, "pid")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(ctx, "/bin/sh", "-c", `sleep 9999 & echo $! > `+fifo+`; wait`)
	done := make(chan error, 1)
	go func() { done <- proc.Run(cmd, &bytes.Buffer{}, &bytes.Buffer{}, time.Second) }()
	b, err := os.ReadFile(fifo) // blocks until the command has started its child
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatalf("pid %q: %v", b, err)
	}
	cancel()
	err = offloadtest.WaitOrTimeout(t, done, "run to return after cancel")
	var ee *exec.ExitError
	if !errors.As(err, &ee) && !errors.Is(err, context.Canceled) {
		t.Errorf("run: %v", err)
	}
	offloadtest.WaitDead(t, pid)
}

func TestRunExitCode(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	err := proc.Run(exec.Command("/bin/sh", "-c", "echo hi; exit 3"), &out, &bytes.Buffer{}, time.Second)
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 3 || out.String() != "hi\n" {
		t.Fatalf("err %v out %q", err, out.String())
	}
}

func TestEnviron(t *testing.T) {
	t.Parallel()
	vars := map[string]string{
		"PATH": "/bin", "HOME": "/h", "LANG": "C.UTF-8", "TZ": "",
		"OPENAI_API_KEY": "sk-secret", "NATS_URL": "nats://u:p@h", "NATS_CREDS": "/c", "NATS_NKEY": "/n",
		"RESEARCH_API_KEY": "r",
	}
	got := proc.Environ(func(k string) string { return vars[k] }, []string{"RESEARCH_API_KEY", "PATH", "MISSING"},
		proc.Task{ID: "01TASK", ConversationID: "01CONV", Attempt: 2, IdempotencyKey: "01TASK:2"})
	want := []string{"PATH=/bin", "HOME=/h", "LANG=C.UTF-8", "RESEARCH_API_KEY=r",
		"OFFLOAD_TASK_ID=01TASK", "OFFLOAD_CONVERSATION_ID=01CONV", "OFFLOAD_ATTEMPT=2", "OFFLOAD_IDEMPOTENCY_KEY=01TASK:2"}
	if !slices.Equal(got, want) {
		t.Fatalf("got  %q\nwant %q", got, want)
	}
}

// TestRunUnreadStdin: a command that exits without reading a large stdin,
// leaving a child that holds it, does not block Run.
func TestRunUnreadStdin(t *testing.T) {
	t.Parallel()
	cmd := exec.Command("/bin/sh", "-c", "sleep 9999 & echo started")
	cmd.Stdin = bytes.NewReader(bytes.Repeat([]byte("x"), 1<<20))
	var out bytes.Buffer
	start := time.Now()
	if err := proc.Run(cmd, &out, &bytes.Buffer{}, 500*time.Millisecond); err != nil {
		t.Fatalf("run: %v", err)
	}
	if d := time.Since(start); d > 3*time.Second || out.String() != "started\n" {
		t.Errorf("took %v, stdout %q", d, out.String())
	}
}
