package builtin_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/offload-dev/offload/internal/offloadtest"
	"github.com/offload-dev/offload/pkg/builtin"
)

func TestShell(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	sh := toolsFor(t, builtin.Config{Root: root})["shell"]

	out, err := call(t.Context(), t, sh, `{"command":"echo out; echo err >&2; exit 3"}`)
	if err != nil {
		t.Fatal(err)
	}
	if r := out.(builtin.ShellResult); r != (builtin.ShellResult{ExitCode: 3, Stdout: "out\n", Stderr: "err\n"}) {
		t.Errorf("result = %+v", r)
	}

	out, err = call(t.Context(), t, sh, `{"command":"pwd"}`)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := filepath.EvalSymlinks(root)
	if got, _ := filepath.EvalSymlinks(strings.TrimSpace(out.(builtin.ShellResult).Stdout)); got != want {
		t.Errorf("ran in %q, want %q", got, want)
	}

	_, err = call(t.Context(), t, sh, `{"command":"  "}`)
	wantFail(t, err, "command is empty")
	if _, err := sh.ParseArgs(`{"command":"true","timeout_seconds":-1}`); err == nil {
		t.Error("negative timeout accepted by the schema")
	}
}

func TestShellTruncatesOutput(t *testing.T) {
	t.Parallel()
	sh := toolsFor(t, builtin.Config{Root: t.TempDir()})["shell"]
	out, err := call(t.Context(), t, sh, `{"command":"head -c 100000 /dev/zero | tr '\\0' x; head -c 10 /dev/zero | tr '\\0' y >&2"}`)
	if err != nil {
		t.Fatal(err)
	}
	r := out.(builtin.ShellResult)
	want := strings.Repeat("x", builtin.MaxShellOutputBytes) + "\n[truncated: 34464 more bytes]"
	if r.Stdout != want || r.Stderr != "yyyyyyyyyy" || r.ExitCode != 0 {
		t.Errorf("stdout %d bytes ending %q, stderr %q", len(r.Stdout), r.Stdout[len(r.Stdout)-40:], r.Stderr)
	}
}

func TestShellTimeout(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		cfg  builtin.Config
		args string
		want string
	}{
		{"PerCall", builtin.Config{}, `{"command":"sleep 5","timeout_seconds":0.05}`, "timed out after 50ms"},
		{"Default", builtin.Config{ShellTimeout: 50 * time.Millisecond}, `{"command":"sleep 5"}`, "timed out after 50ms"},
		{"Capped", builtin.Config{ShellMaxTimeout: 50 * time.Millisecond}, `{"command":"sleep 5","timeout_seconds":100}`, "timed out after 50ms"},
		{"DefaultCapped", builtin.Config{ShellMaxTimeout: 50 * time.Millisecond}, `{"command":"sleep 5"}`, "timed out after 50ms"},
		// The background child holds stdout; killing the group frees it.
		{"Children", builtin.Config{}, `{"command":"sleep 30 & sleep 30","timeout_seconds":0.05}`, "timed out"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.cfg.Root = t.TempDir()
			sh := toolsFor(t, tc.cfg)["shell"]
			start := time.Now()
			_, err := call(t.Context(), t, sh, tc.args)
			wantFail(t, err, tc.want)
			if d := time.Since(start); d > 2*time.Second {
				t.Errorf("took %s", d)
			}
		})
	}
}

func TestShellCancelKillsProcessGroup(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	fifo := filepath.Join(root, "started")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	sh := toolsFor(t, builtin.Config{Root: root})["shell"]
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := call(ctx, t, sh, `{"command":"sleep 30 & echo $! > started; sleep 30"}`)
		done <- err
	}()
	pid, err := os.ReadFile(fifo) // blocks until the command runs
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	err = offloadtest.WaitOrTimeout(t, done, "the shell to return after cancel")
	if !errors.Is(err, context.Canceled) {
		t.Errorf("err = %v, want context.Canceled", err)
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(pid)))
	if err != nil {
		t.Fatal(err)
	}
	offloadtest.WaitDead(t, n)
}
