package cmdtool

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/offload-dev/offload/internal/proc"
	"github.com/offload-dev/offload/pkg/protocol"
	"github.com/offload-dev/offload/pkg/tool"
)

// MaxOutputBytes is the largest stdout a command may write: 1 MiB less the
// room a result's envelope needs ([protocol.MaxContentBytes]) and the two
// quotes of a JSON string. Output within it whose JSON encoding is larger
// than [protocol.MaxContentBytes] (escaped characters) is refused too, so
// that every accepted output fits a result message.
const MaxOutputBytes = protocol.MaxContentBytes - 2

// maxStderrBytes is how much of stderr is kept for the logs.
const maxStderrBytes = 8 << 10

// drainDelay bounds how long a command's output pipes are drained after its
// process group was killed (a child that left the group may hold them).
const drainDelay = 2 * time.Second

// Options configures the tools built by [Config.Tools].
type Options struct {
	// Dir is the working directory of the commands. Defaults to the
	// directory of the config file for a config from [Load], and to the
	// current directory for one from [Parse].
	Dir string
	// Logger receives failed commands' stderr. Defaults to discarding.
	Logger *slog.Logger
	// Getenv reads the process environment the commands' minimal
	// environment is taken from. Defaults to os.Getenv.
	Getenv func(string) string
	// Reaper, when set, kills every descendant of a command when it ends,
	// also those that left its process group (setsid, a double fork).
	// Without one only the process group is killed.
	Reaper *proc.Reaper
	// ToolUser names the user the commands run as when the process is
	// root: a user name or numeric ID, run with every privilege dropped
	// so that the commands cannot read the process's environment or
	// memory (proc.ToolUser, proc.User.Start). Empty, or a user of ID 0:
	// the commands run as the process's own user, as they always do when
	// the process is not root. toolworker gives --tool-user (default
	// nobody).
	ToolUser string
}

// Tools builds the declared tools. It fails when a program cannot be found
// (in PATH, or relative to the working directory), when the tool user
// (Options.ToolUser) is not a user, and when it cannot enter the working
// directory or run a program (wrapping proc.ErrNoAccess).
func (c *Config) Tools(opts Options) ([]*tool.Tool, error) {
	dir := opts.Dir
	if dir == "" {
		dir = c.dir
	}
	if dir == "" {
		dir = "."
	}
	dir, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("cmdtool: working directory: %w", err)
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	getenv := opts.Getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	user, err := proc.ToolUser(opts.ToolUser)
	if err != nil {
		return nil, fmt.Errorf("cmdtool: tool user: %w", err)
	}
	if len(c.Specs) > 0 {
		if err := user.CheckDir(dir, false); err != nil {
			return nil, fmt.Errorf("cmdtool: working directory: %w", err)
		}
	}
	out := make([]*tool.Tool, 0, len(c.Specs))
	for i := range c.Specs {
		s := &c.Specs[i]
		def, err := s.def()
		if err != nil {
			return nil, err
		}
		prog, err := resolve(dir, s.Command[0])
		if err != nil {
			return nil, s.errorf("command: %v", err)
		}
		if err := user.CheckExec(prog); err != nil {
			return nil, fmt.Errorf("cmdtool: tool %q: command: %w", s.Name, err)
		}
		r := &runner{
			name:    s.Name,
			prog:    prog,
			args:    s.Command[1:],
			dir:     dir,
			timeout: s.timeout(),
			json:    s.Output == OutputJSON,
			env:     slices.Clone(s.Env),
			getenv:  getenv,
			log:     log,
			runner:  proc.Runner{Reaper: opts.Reaper, User: user},
		}
		t, err := tool.New(def, r.run, tool.Timeout(r.timeout)) // advertised: it bounds a background call too
		if err != nil {
			return nil, s.errorf("%v", err)
		}
		t.Limits = s.Limits
		out = append(out, t)
	}
	return out, nil
}

// resolve returns the program to run: a path relative to dir if it has a
// separator, else the result of a PATH lookup.
func resolve(dir, prog string) (string, error) {
	if !strings.ContainsRune(prog, filepath.Separator) && !strings.ContainsRune(prog, '/') {
		return exec.LookPath(prog)
	}
	if !filepath.IsAbs(prog) {
		prog = filepath.Join(dir, prog)
	}
	fi, err := os.Stat(prog)
	if err != nil {
		return "", err
	}
	if fi.IsDir() {
		return "", fmt.Errorf("%s is a directory", prog)
	}
	return prog, nil
}

// runner runs one tool's command.
type runner struct {
	name    string
	prog    string
	args    []string
	dir     string
	timeout time.Duration
	json    bool
	env     []string
	getenv  func(string) string
	log     *slog.Logger
	runner  proc.Runner
}

func (r *runner) run(ctx context.Context, rc *tool.RunContext, args json.RawMessage) (any, error) {
	if len(bytes.TrimSpace(args)) == 0 {
		args = json.RawMessage("{}")
	}
	runCtx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()

	var task proc.Task
	if rc != nil {
		task = proc.Task{ID: rc.TaskID, ConversationID: rc.ConversationID, Attempt: rc.Attempt, IdempotencyKey: rc.IdempotencyKey}
	}
	cmd := exec.CommandContext(runCtx, r.prog, r.args...)
	cmd.Dir = r.dir
	cmd.Env = proc.Environ(r.getenv, r.env, task)
	cmd.Stdin = bytes.NewReader(args)
	stdout := &capped{limit: MaxOutputBytes}
	stderr := &capped{limit: maxStderrBytes, keepTail: true}

	start := time.Now()
	// The process group is killed when the command exits, times out or is
	// cancelled, and with a reaper every descendant that left it: no
	// background child outlives the call. Under root, the command runs as
	// the tool user, every privilege dropped.
	err := r.runner.Run(cmd, stdout, stderr, drainDelay)
	elapsed := time.Since(start)

	if ctx.Err() != nil {
		return nil, fmt.Errorf("cmdtool: tool %s: %w", r.name, context.Cause(ctx))
	}
	if runCtx.Err() != nil {
		r.log.WarnContext(ctx, "cmdtool: command timed out",
			slog.String("tool", r.name), slog.Duration("timeout", r.timeout), slog.String("stderr", stderr.String()))
		return nil, &DeadlineExceeded{Tool: r.name, Timeout: r.timeout}
	}
	var exitErr *exec.ExitError
	switch {
	case errors.As(err, &exitErr) && exitErr.ExitCode() == ExitTempFail:
		// The service behind the command refused the call for now
		// (SPEC §19): stdout says for how long.
		after, ok := retryAfterOf(stdout.Bytes())
		r.log.InfoContext(ctx, "cmdtool: command asked to be run again later",
			slog.String("tool", r.name), slog.Duration("retry_after", after), slog.Bool("said", ok))
		return nil, &tool.RateLimited{After: after, Message: "command " + r.name + " exited 75"}
	case errors.As(err, &exitErr):
		e := &CommandFailed{Tool: r.name, ExitCode: exitErr.ExitCode(), Stderr: stderr.String()}
		r.log.WarnContext(ctx, "cmdtool: command failed",
			slog.String("tool", r.name), slog.Int("exit_code", e.ExitCode),
			slog.Duration("elapsed", elapsed), slog.String("stderr", e.Stderr))
		return nil, e
	case errors.Is(err, proc.ErrOutputHeld):
		// The command exited 0 but something it started left the process
		// group and kept stdout open; what was written so far is the result.
		r.log.WarnContext(ctx, "cmdtool: a child of the command left its process group and held stdout",
			slog.String("tool", r.name))
	case err != nil:
		return nil, fmt.Errorf("cmdtool: tool %s: %w", r.name, err)
	}
	if stderr.Len() > 0 {
		r.log.DebugContext(ctx, "cmdtool: command stderr",
			slog.String("tool", r.name), slog.String("stderr", stderr.String()))
	}
	if stdout.overflow {
		return nil, &ResultTooLarge{Tool: r.name, Limit: MaxOutputBytes}
	}
	out := stdout.Bytes()
	out = bytes.TrimSuffix(out, []byte("\n"))
	var value any
	if !r.json {
		value = string(out)
	} else {
		var buf bytes.Buffer
		if err := json.Compact(&buf, out); err != nil {
			return nil, &InvalidOutput{Tool: r.name, Err: err}
		}
		if buf.Len() == 0 {
			return nil, &InvalidOutput{Tool: r.name, Err: errors.New("empty output")}
		}
		value = json.RawMessage(buf.Bytes())
	}
	// The result carries the output JSON-encoded: escaping may make it
	// larger than the message allows.
	if enc, err := json.Marshal(value); err != nil || len(enc) > protocol.MaxContentBytes {
		return nil, &ResultTooLarge{Tool: r.name, Limit: MaxOutputBytes}
	}
	return value, nil
}

// capped is an io.Writer keeping at most limit bytes (the first ones, or the
// last ones with keepTail) and swallowing the rest, so that the command never
// blocks on a full pipe. The buffer is not embedded: its ReadFrom would let
// io.Copy bypass Write.
type capped struct {
	buf      bytes.Buffer
	limit    int
	keepTail bool
	overflow bool
}

func (c *capped) Write(p []byte) (int, error) {
	n := len(p)
	if c.keepTail {
		c.buf.Write(p)
		if extra := c.buf.Len() - c.limit; extra > 0 {
			c.overflow = true
			c.buf.Next(extra)
		}
		return n, nil
	}
	if room := c.limit - c.buf.Len(); len(p) > room {
		c.overflow = true
		p = p[:max(room, 0)]
	}
	c.buf.Write(p)
	return n, nil
}

// Bytes returns the kept bytes.
func (c *capped) Bytes() []byte { return c.buf.Bytes() }

// Len returns the number of kept bytes.
func (c *capped) Len() int { return c.buf.Len() }

// String returns the kept bytes as a string.
func (c *capped) String() string { return c.buf.String() }
