package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/offload-dev/offload/internal/natsflags"
	"github.com/offload-dev/offload/pkg/natsjs"
	"github.com/offload-dev/offload/pkg/natsjs/conformance"
	"github.com/offload-dev/offload/pkg/protocol"
)

// checkOptions are the flags of toolworker check.
type checkOptions struct {
	conn     natsflags.Flags
	tool     string
	args     string
	slowArgs string
	prefix   string
	timeout  time.Duration
	exec     string
}

// runCheck is `toolworker check`: the conformance kit (SPEC §15) run
// against the worker serving --tool, one line per rule on stdout, exit 1
// when any rule fails or the check cannot start.
func runCheck(stdout io.Writer, args []string, getenv func(string) string, stderr io.Writer) int {
	o := &checkOptions{}
	parsed := false
	cmd := &cobra.Command{
		Use:   "toolworker check --tool NAME [--args JSON] [--slow-args JSON] [--exec CMD] [connection flags]",
		Short: "Check the worker serving a tool against the wire protocol's rules (docs/PROTOCOL.md)",
		Long: "Plays the agent's part against the running worker(s) of --tool and prints one line per rule:\n" +
			"`<rule>: ok`, `<rule>: FAIL: <what was seen>` or `<rule>: skip: <what is missing>`; exit 1 on any failure.\n" +
			"A rule is named for the rule of a task it checks (docs/PROTOCOL.md, \"The rules of a task\"), followed by\n" +
			"what it checks where several check one; the registry, SIGTERM and SIGKILL rules check the process.\n" +
			"--args is a call that succeeds quickly; --slow-args one that succeeds after running longer than\n" +
			"the task consumer's ack wait (without it, the rules that need a running task are skipped).\n" +
			"--exec starts the worker under test itself (no other worker of the tool may run), to check\n" +
			"its SIGTERM hand-back and its recovery from SIGKILL too; its output goes to stderr.",
	}
	flagParser(cmd, stderr, &parsed)
	defURL := defaultURL(getenv)
	fs := cmd.Flags()
	o.conn.Register(fs, getenv, defURL, "NATS server URL, or a comma-separated list of a cluster's (env NATS_URL)")
	fs.StringVar(&o.tool, "tool", "", "the tool whose worker is checked (required)")
	fs.StringVar(&o.args, "args", "{}", "arguments (a JSON object) of a call that succeeds quickly")
	fs.StringVar(&o.slowArgs, "slow-args", "", "arguments of a call that succeeds after running longer than the task consumer's ack wait")
	fs.StringVar(&o.prefix, "prefix", protocol.DefaultPrefix, "subject prefix")
	fs.DurationVar(&o.timeout, "timeout", 30*time.Second, "how long to wait for each result, and for the started worker's start and stop")
	fs.StringVar(&o.exec, "exec", "", "command (run by sh) that starts the worker under test, which the kit then starts, stops and kills itself")
	cmd.SetArgs(longFlags(args, fs))
	if err := cmd.Execute(); err != nil {
		fmt.Fprintln(stderr, "toolworker check:", err)
		return exitUsage
	}
	if !parsed {
		return exitOK // --help
	}
	cfg, url, copts, err := o.config(getenv)
	if err != nil {
		fmt.Fprintln(stderr, "toolworker check:", err)
		return exitUsage
	}
	if w := o.conn.ArgvSecretWarning(); w != "" {
		fmt.Fprintln(stderr, "toolworker check:", w)
	}
	copts.Name = "toolworker check"
	nc, err := natsjs.Connect(url, copts)
	if err != nil {
		fmt.Fprintln(stderr, "toolworker check:", err)
		return exitFailed
	}
	defer nc.Close()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	cfg.Conn, cfg.ExecOutput = nc, stderr
	cfg.OnOutcome = func(oc conformance.Outcome) { fmt.Fprintln(stdout, oc) }
	outcomes, err := conformance.Run(ctx, cfg)
	if err != nil {
		fmt.Fprintln(stderr, "toolworker check:", err)
		return exitFailed
	}
	if conformance.Failed(outcomes) {
		return exitFailed
	}
	return exitOK
}

// config checks the flags and returns the kit's configuration (without
// its connection) and the connection's servers and options.
func (o *checkOptions) config(getenv func(string) string) (conformance.Config, string, natsjs.ConnectOptions, error) {
	cfg := conformance.Config{Prefix: o.prefix, Tool: o.tool, Timeout: o.timeout, Exec: o.exec}
	if o.tool == "" {
		return cfg, "", natsjs.ConnectOptions{}, errors.New("--tool is required")
	}
	if err := protocol.ValidatePrefix(o.prefix); err != nil {
		return cfg, "", natsjs.ConnectOptions{}, err
	}
	for _, a := range []struct {
		flag, value string
		dst         *json.RawMessage
	}{{"--args", o.args, &cfg.Args}, {"--slow-args", o.slowArgs, &cfg.SlowArgs}} {
		if a.value == "" {
			continue
		}
		var obj map[string]any
		if err := json.Unmarshal([]byte(a.value), &obj); err != nil {
			return cfg, "", natsjs.ConnectOptions{}, fmt.Errorf("%s: not a JSON object: %w", a.flag, err)
		}
		*a.dst = json.RawMessage(a.value)
	}
	copts, err := o.conn.Options(getenv)
	if err != nil {
		return cfg, "", natsjs.ConnectOptions{}, err
	}
	return cfg, o.conn.Servers(copts), copts, nil
}
