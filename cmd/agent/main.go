// Command agent runs an LLM agent whose tools run in-process or on
// toolworker replicas over NATS JetStream.
//
//	agent run [flags] PROMPT
//	agent resume --conversation ID [--approve-task T] [--deny-task T[=MSG]] [--result T=JSON] [PROMPT]
//	agent pending [--conversation ID]
//	agent approve|deny --conversation ID TASK [--message M] [--args JSON] [--by NAME]
//	agent answer --conversation ID TASK JSON
//	agent history --conversation ID
//	agent provision
//	agent tools [list | pause | resume | dead | replay | discard | cancel]
//
// Exit codes: 0 finished; 3 paused with pending deferred calls; 1 run failed;
// 2 usage or configuration error; 130 interrupted. See docs/CLI.md.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
	"go.opentelemetry.io/otel/trace"

	"github.com/offload-dev/offload/internal/otelenv"
	"github.com/offload-dev/offload/internal/proc"
	"github.com/offload-dev/offload/pkg/agent/liveview"
)

// Exit codes of SPEC §6.1.
const (
	exitOK          = liveview.ExitOK
	exitFailed      = liveview.ExitFailed
	exitUsage       = liveview.ExitUsage
	exitPaused      = liveview.ExitPaused
	exitInterrupted = liveview.ExitInterrupted
)

// env is what a command sees of its process: arguments, environment and
// standard streams. Tests drive commands through it.
type env struct {
	getenv func(string) string
	stdin  io.Reader
	stdout io.Writer
	stderr io.Writer
	// isTerminal reports whether stdin and stdout are both terminals.
	isTerminal bool
	// suspend is closed on SIGTERM: a run stops at its next safe point,
	// saves its state and exits 3 (SPEC §6.1).
	suspend <-chan struct{}
	// reaper kills every descendant of the shell commands the in-process
	// worker runs (the embedded default); nil in tests that run the
	// command in-process.
	reaper *proc.Reaper
	// tracer records the spans of SPEC §14 when the OTEL_* variables ask
	// for traces (internal/otelenv); nil otherwise.
	tracer trace.TracerProvider
}

// errInterrupted is the cause of the command's context once SIGINT
// arrived. It is a cancellation (errors.Is context.Canceled), so the run
// ends as interrupted, and its text is what the final event says.
var errInterrupted error = interruptError{}

type interruptError struct{}

func (interruptError) Error() string { return "interrupted by SIGINT" }

func (interruptError) Is(target error) bool { return target == context.Canceled }

// exitError carries an exit code out of a command.
type exitError = liveview.Exit

func usageErr(format string, args ...any) error {
	return &exitError{Code: exitUsage, Err: fmt.Errorf(format, args...)}
}

func main() {
	proc.SentinelMain() // the reaper's sentinel is this binary again
	// SIGINT interrupts (live tasks cancelled, exit 130): the context's
	// cause, errInterrupted, says so in the final event; SIGTERM (a
	// deploy, a supervisor) suspends: state saved, live background tasks
	// left running, exit 3.
	ctx, interrupt := context.WithCancelCause(context.Background())
	defer interrupt(nil)
	intr := make(chan os.Signal, 1)
	signal.Notify(intr, os.Interrupt)
	go func() {
		<-intr
		interrupt(errInterrupted)
	}()
	term := make(chan os.Signal, 1)
	signal.Notify(term, syscall.SIGTERM)
	suspend := make(chan struct{})
	go func() {
		<-term
		close(suspend)
	}()
	e := env{getenv: os.Getenv, stdin: os.Stdin, stdout: os.Stdout, stderr: os.Stderr, isTerminal: isTerminal(os.Stdin) && isTerminal(os.Stdout), suspend: suspend}
	// The process holds OPENAI_API_KEY and NATS credentials and may run
	// tools in-process (the embedded default): no child may read them
	// (/proc/<pid>/environ) nor outlive its task.
	if err := proc.NoDump(); err != nil {
		fmt.Fprintln(os.Stderr, "agent: warning:", err)
	}
	if r, err := proc.NewReaper(); err != nil {
		fmt.Fprintln(os.Stderr, "agent: warning:", err)
	} else {
		e.reaper = r
	}
	os.Exit(execute(ctx, os.Args[1:], e))
}

// execute runs the command line and returns the process exit code.
func execute(ctx context.Context, args []string, e env) int {
	tp, err := otelenv.New(ctx, e.getenv, "agent")
	if err != nil {
		fmt.Fprintln(e.stderr, "agent:", err)
		return exitUsage
	}
	defer tp.ShutdownWithin(e.stderr, "agent")
	if tp.Enabled {
		e.tracer = tp
	}
	root := &cobra.Command{
		Use:           "agent",
		Short:         "Run an LLM agent whose slow and approval-gated tools run on workers over NATS JetStream",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetArgs(args)
	root.SetIn(e.stdin)
	root.SetOut(e.stdout)
	root.SetErr(e.stderr)
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return &exitError{Code: exitUsage, Err: err} })
	root.AddCommand(newRunCmd(e))
	root.AddCommand(newResumeCmd(e))
	root.AddCommand(newPendingCmd(e))
	root.AddCommand(newDecideCmd(e, true))
	root.AddCommand(newDecideCmd(e, false))
	root.AddCommand(newAnswerCmd(e))
	root.AddCommand(newHistoryCmd(e))
	root.AddCommand(newProvisionCmd(e))
	root.AddCommand(newServeCmd(e))
	root.AddCommand(newToolsCmd(e))
	err = root.ExecuteContext(ctx)
	if err == nil {
		return exitOK
	}
	var ee *exitError
	if errors.As(err, &ee) {
		if ee.Err != nil {
			fmt.Fprintln(e.stderr, "agent:", ee.Err)
		}
		return ee.Code
	}
	// Errors from cobra itself (unknown command, bad arguments) are usage
	// errors.
	fmt.Fprintln(e.stderr, "agent:", err)
	return exitUsage
}

func isTerminal(f *os.File) bool {
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
