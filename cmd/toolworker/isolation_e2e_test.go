package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/offload-dev/offload/internal/offloadtest"
	"github.com/offload-dev/offload/internal/proctest"
	"github.com/offload-dev/offload/pkg/natsjs/natstest"
	"github.com/offload-dev/offload/pkg/natsjs/remote"
	"github.com/offload-dev/offload/pkg/protocol"
)

// The secrets of the worker's environment in TestToolIsolation.
const (
	workerPassword = "worker-pw-7c1e9b"
	workerAPIKey   = "sk-isolation-5a8d2f"
)

// detachScript double-forks a `sleep 600` into a new session (setsid, and
// its parent exits at once), writes its PID to <task ID>.pid, then sleeps
// $1 seconds.
const detachScript = `#!/bin/sh
setsid sh -c 'sleep 600 & echo $! > "$1.tmp" && mv "$1.tmp" "$1"' sh "$OFFLOAD_TASK_ID.pid" &
wait
exec sleep "$1"
`

const isolationConfig = `tools:
  - name: snoop
    description: Read the worker's environment and command line.
    command: ["/bin/sh", "-c", "cat /proc/$PPID/environ; echo; tr '\\0' ' ' < /proc/$PPID/cmdline; echo"]
    parameters: {type: object, properties: {}}
  - name: detach
    description: Leave a detached sleep behind and exit.
    command: ["./detach.sh", "0"]
    parameters: {type: object, properties: {}}
  - name: detach_hold
    description: Leave a detached sleep behind and run on.
    command: ["./detach.sh", "600"]
    timeout: 2s
    parameters: {type: object, properties: {}}
`

// startIsolatedWorker starts toolworker serving isolationConfig on url,
// with a password in NATS_URL and an API key in its environment. Run as
// root, the test runs it as nobody: root reads any process's environment
// (CAP_SYS_PTRACE), and a tool runs as its worker's user.
func startIsolatedWorker(t *testing.T, bin, url string) (dir string) {
	t.Helper()
	dir = secretWorkerDir(t, bin, map[string]string{"detach.sh": detachScript, "tools.yaml": isolationConfig})
	if err := os.Chmod(dir, 0o777); err != nil { // the worker, run as nobody, writes its pid files there
		t.Fatal(err)
	}
	var cred *syscall.Credential
	if os.Geteuid() == 0 {
		cred = &syscall.Credential{Uid: 65534, Gid: 65534}
	}
	startSecretWorker(t, dir, url, cred, "--config", filepath.Join(dir, "tools.yaml"), "--tools", "snoop,detach,detach_hold")
	return dir
}

// secretWorkerDir returns a new directory outside t.TempDir (whose parents
// are 0700: no other user enters them) holding a copy of the toolworker
// binary bin and files (name → content; scripts, ending in .sh, are
// executable).
func secretWorkerDir(t *testing.T, bin string, files map[string]string) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "offload-isolation") //nolint:usetesting // other users must enter it: t.TempDir's parents are 0700
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "toolworker"), string(b), 0o755)
	for name, content := range files {
		mode := os.FileMode(0o644)
		if strings.HasSuffix(name, ".sh") {
			mode = 0o755
		}
		writeFile(t, filepath.Join(dir, name), content, mode)
	}
	return dir
}

// startSecretWorker starts dir's toolworker with args, in dir, with a
// password in NATS_URL (the server at url) and an API key in its
// environment: as the user of cred, or as the test's user when nil. It
// returns once the worker serves.
func startSecretWorker(t *testing.T, dir, url string, cred *syscall.Credential, args ...string) {
	t.Helper()
	secretURL := strings.Replace(url, "nats://", "nats://worker:"+workerPassword+"@", 1)
	cmd := exec.Command(filepath.Join(dir, "toolworker"), args...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=/root", "NATS_URL=" + secretURL, "OPENAI_API_KEY=" + workerAPIKey}
	cmd.Dir = dir
	if cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	lines := bufio.NewScanner(stderr)
	var seen []string
	for lines.Scan() {
		if strings.Contains(lines.Text(), `"msg":"toolworker started"`) {
			go func() { _, _ = io.Copy(io.Discard, stderr) }()
			return
		}
		seen = append(seen, lines.Text())
	}
	t.Fatalf("toolworker did not start: %v\n%s", lines.Err(), strings.Join(seen, "\n"))
}

// detachedGone checks that the detached sleep of task tk, whose pid the
// detach tools wrote in dir, is no more.
func detachedGone(t *testing.T, dir string, tk protocol.Task) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, tk.TaskID+".pid"))
	if err != nil {
		t.Fatalf("no pid file: %v", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 1 {
		t.Fatalf("pid file %q", b)
	}
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) })
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		stat, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		t.Errorf("the detached sleep %d outlived its task (kill 0: %v; %s)", pid, err, stat)
	}
}

// TestToolIsolation (issue 30, finding 7), with real processes: a command
// tool cannot read its worker's secrets from /proc/$PPID/environ (the
// worker is not dumpable) nor from /proc/$PPID/cmdline (none is in argv),
// and a descendant that detached (setsid and a double fork) is gone once
// its task ends: when the command exits, when it is cancelled and when it
// times out.
func TestToolIsolation(t *testing.T) {
	t.Parallel()
	bin, _ := binaries(t)
	srv := natstest.Start(t)
	dir := startIsolatedWorker(t, bin, srv.URL())
	ctx := context.Background()
	nc := srv.Conn(t)
	d, err := remote.NewDispatcher(remote.DispatcherConfig{Conn: srv.Conn(t)})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Stop(context.Background()) })
	task := func(name string) protocol.Task {
		return protocol.Task{TaskID: protocol.NewID(), Tool: name, Args: json.RawMessage(`{}`), ConversationID: protocol.NewID()}
	}

	t.Run("no secrets", func(t *testing.T) {
		res, err := d.Call(ctx, task("snoop"))
		if err != nil {
			t.Fatal(err)
		}
		out := string(res.Content)
		if !strings.Contains(out, "toolworker") {
			t.Fatalf("the tool did not read the command line: %s", out)
		}
		for _, secret := range []string{workerPassword, workerAPIKey} {
			if strings.Contains(out, secret) {
				t.Errorf("the tool read %q from its worker: %s", secret, out)
			}
		}
	})

	gone := func(t *testing.T, tk protocol.Task) {
		t.Helper()
		detachedGone(t, dir, tk)
	}
	pidFile := func(tk protocol.Task) func() bool {
		return func() bool {
			_, err := os.Stat(filepath.Join(dir, tk.TaskID+".pid"))
			return err == nil
		}
	}

	t.Run("exit", func(t *testing.T) {
		tk := task("detach")
		res, err := d.Call(ctx, tk)
		if err != nil || res.Status != protocol.StatusOK {
			t.Fatalf("detach: %+v, %v", res, err)
		}
		gone(t, tk)
	})
	t.Run("cancel", func(t *testing.T) {
		tk := task("detach_hold")
		h, err := d.Dispatch(ctx, tk)
		if err != nil {
			t.Fatal(err)
		}
		offloadtest.Eventually(t, "the detached sleep's pid file", pidFile(tk))
		// The worker's own result, published once the tool returned (the
		// dispatcher settles a cancelled call at once).
		sub, err := nc.SubscribeSync("tools.result." + tk.ConversationID + "." + tk.TaskID + "." + tk.Tool)
		if err != nil {
			t.Fatal(err)
		}
		if err := h.Cancel(ctx, "test"); err != nil {
			t.Fatal(err)
		}
		m, err := sub.NextMsg(30 * time.Second)
		if err != nil {
			t.Fatalf("no result from the worker: %v", err)
		}
		var res protocol.Result
		if err := json.Unmarshal(m.Data, &res); err != nil || res.Status != protocol.StatusCancelled {
			t.Fatalf("cancelled detach_hold: %s, %v", m.Data, err)
		}
		gone(t, tk)
	})
	t.Run("timeout", func(t *testing.T) {
		tk := task("detach_hold")
		wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		res, err := d.Call(wctx, tk)
		if err != nil || res.ErrorType != protocol.ErrorDeadlineExceeded {
			t.Fatalf("detach_hold past its timeout: %+v, %v", res, err)
		}
		gone(t, tk)
	})
}

// holdScript leaves a detached `sleep 600` behind (setsid and a double
// fork), writes its pid to <task ID>.detached, writes its own to <task
// ID>.leader and becomes a `sleep 600`.
const holdScript = `#!/bin/sh
setsid sh -c 'sleep 600 & echo $! > "$1.tmp" && mv "$1.tmp" "$1"' sh "$OFFLOAD_TASK_ID.detached" &
wait
echo $$ > "$OFFLOAD_TASK_ID.tmp" && mv "$OFFLOAD_TASK_ID.tmp" "$OFFLOAD_TASK_ID.leader"
exec sleep 600
`

// TestToolCommandDiesWithWorker (issue 39): a command tool that runs on,
// and what it detached, die with its worker SIGKILLed mid-call (before,
// both ran on under init: a command that never writes its stdout does not
// notice that the worker is gone).
func TestToolCommandDiesWithWorker(t *testing.T) {
	t.Parallel()
	bin, _ := binaries(t)
	srv := natstest.Start(t)
	dir := proctest.ToolDir(t)
	writeFile(t, filepath.Join(dir, "hold.sh"), holdScript, 0o755)
	writeFile(t, filepath.Join(dir, "tools.yaml"), `tools:
  - name: hold
    description: Leave a detached sleep behind and run on.
    command: ["./hold.sh"]
    timeout: 1h
    parameters: {type: object, properties: {}}
`, 0o644)
	w := startWorker(t, bin, "--nats", srv.URL(), "--config", filepath.Join(dir, "tools.yaml"), "--id", "hold", "-v")
	ctx := context.Background()
	d, err := remote.NewDispatcher(remote.DispatcherConfig{Conn: srv.Conn(t)})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Stop(context.Background()) })
	tk := protocol.Task{TaskID: protocol.NewID(), Tool: "hold", Args: json.RawMessage(`{}`), ConversationID: protocol.NewID()}
	if _, err := d.Dispatch(ctx, tk); err != nil {
		t.Fatal(err)
	}
	var pids []int
	for _, name := range []string{tk.TaskID + ".leader", tk.TaskID + ".detached"} {
		var b []byte
		offloadtest.Eventually(t, "the command's pid file "+name, func() error {
			b, err = os.ReadFile(filepath.Join(dir, name))
			return err
		})
		pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil || pid <= 1 {
			t.Fatalf("pid file %s: %q", name, b)
		}
		t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) })
		pids = append(pids, pid)
	}
	w.Kill()
	for _, pid := range pids {
		offloadtest.WaitDead(t, pid)
	}
}
