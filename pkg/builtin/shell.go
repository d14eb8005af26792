package builtin

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os/exec"
	"strings"
	"time"

	"github.com/google/jsonschema-go/jsonschema"

	"github.com/offload-dev/offload/internal/proc"
	"github.com/offload-dev/offload/pkg/tool"
)

// ShellArgs are the arguments of shell.
type ShellArgs struct {
	// Command is run with /bin/sh -c in the root directory.
	Command string `json:"command" jsonschema:"The command, run with /bin/sh -c in the root directory."`
	// TimeoutSeconds is the command's timeout; 0 means the default.
	TimeoutSeconds float64 `json:"timeout_seconds,omitempty" jsonschema:"Timeout in seconds. Defaults to the tool's default timeout; capped at its maximum."`
}

// ShellResult is the result of shell. A non-zero exit code is a result, not
// an error.
type ShellResult struct {
	// ExitCode is the command's exit code; -1 when a signal killed it.
	ExitCode int `json:"exit_code"`
	// Stdout is the command's standard output, truncated with a marker after
	// [MaxShellOutputBytes].
	Stdout string `json:"stdout"`
	// Stderr is the command's standard error, truncated likewise.
	Stderr string `json:"stderr"`
}

// shellDrainDelay bounds how long output pipes are drained after the
// shell's process group was killed.
const shellDrainDelay = 2 * time.Second

func shellTool(cfg Config) (*tool.Tool, error) {
	desc := fmt.Sprintf("Run a shell command with /bin/sh -c in the root directory and return its exit code, stdout and stderr (each at most %s). The command times out after %s unless timeout_seconds says otherwise (at most %s).",
		size(MaxShellOutputBytes), cfg.ShellTimeout, cfg.ShellMaxTimeout)
	run := func(ctx context.Context, rc *tool.RunContext, a ShellArgs) (ShellResult, error) {
		var task proc.Task
		if rc != nil {
			task = proc.Task{ID: rc.TaskID, ConversationID: rc.ConversationID, Attempt: rc.Attempt, IdempotencyKey: rc.IdempotencyKey}
		}
		return shell(ctx, cfg, task, a)
	}
	t, err := tool.NewFunc(NameShell, desc, run, tool.NeedsApproval(), tool.Timeout(cfg.ShellMaxTimeout))
	if err != nil {
		return nil, err
	}
	return constrain(t, func(p map[string]*jsonschema.Schema) {
		p["timeout_seconds"].Minimum = jsonschema.Ptr(0.0)
	})
}

func shell(ctx context.Context, cfg Config, task proc.Task, a ShellArgs) (ShellResult, error) {
	if strings.TrimSpace(a.Command) == "" {
		return ShellResult{}, fail("shell: command is empty")
	}
	timeout := cfg.ShellTimeout
	if a.TimeoutSeconds < 0 {
		return ShellResult{}, fail("shell: timeout_seconds must not be negative")
	}
	if a.TimeoutSeconds > 0 {
		timeout = min(time.Duration(a.TimeoutSeconds*float64(time.Second)), cfg.ShellMaxTimeout)
	}
	runCtx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()

	cmd := exec.CommandContext(runCtx, "/bin/sh", "-c", a.Command)
	cmd.Dir = cfg.Root
	// A minimal environment: never the process's secrets (SPEC §6.5).
	cmd.Env = proc.Environ(cfg.Getenv, cfg.ShellEnv, task)
	stdout := &capped{limit: MaxShellOutputBytes}
	stderr := &capped{limit: MaxShellOutputBytes}

	start := time.Now()
	// The process group is killed when the shell exits, times out or is
	// cancelled, and with a reaper every descendant that left it: no
	// background child outlives the call. Under root, the shell runs as the
	// tool user, every privilege dropped.
	err := proc.Runner{Reaper: cfg.Reaper, User: cfg.user}.Run(cmd, stdout, stderr, shellDrainDelay)
	log := cfg.Logger.With(slog.String("command", a.Command), slog.Duration("elapsed", time.Since(start)))
	if ctx.Err() != nil {
		log.InfoContext(ctx, "builtin: shell command cancelled")
		return ShellResult{}, ctxErr(ctx, NameShell)
	}
	if runCtx.Err() != nil {
		log.InfoContext(ctx, "builtin: shell command timed out", slog.Duration("timeout", timeout))
		return ShellResult{}, fail("shell: the command timed out after %s and was killed", timeout)
	}
	res := ShellResult{Stdout: stdout.text(), Stderr: stderr.text()}
	var exitErr *exec.ExitError
	switch {
	case err == nil, errors.Is(err, proc.ErrOutputHeld):
	case errors.As(err, &exitErr):
		res.ExitCode = exitErr.ExitCode()
	default:
		return ShellResult{}, fmt.Errorf("builtin: shell: %w", err)
	}
	log.InfoContext(ctx, "builtin: shell command ran", slog.Int("exit_code", res.ExitCode))
	return res, nil
}

// capped is an io.Writer keeping the first limit bytes and counting the
// rest, so that the command never blocks on a full pipe. The buffer is not
// embedded: its ReadFrom would let io.Copy bypass Write.
type capped struct {
	buf     bytes.Buffer
	limit   int
	dropped int64
}

func (c *capped) Write(p []byte) (int, error) {
	n := len(p)
	if room := c.limit - c.buf.Len(); len(p) > room {
		c.dropped += int64(len(p) - max(room, 0))
		p = p[:max(room, 0)]
	}
	c.buf.Write(p)
	return n, nil
}

// text returns the kept output as valid UTF-8, with a marker if truncated.
func (c *capped) text() string {
	s := strings.ToValidUTF8(c.buf.String(), "\uFFFD")
	if c.dropped > 0 {
		s += fmt.Sprintf("\n[truncated: %d more bytes]", c.dropped)
	}
	return s
}
