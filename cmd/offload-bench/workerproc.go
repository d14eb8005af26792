package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/offload-dev/offload/internal/otelenv"
)

// The effect ledger's and the tracing's sections run their workers in a
// child process (this binary with -bench-worker), as a fleet runs them
// apart from the agents: the CPU each call costs is then measured per
// process, the agent's (this process), the server's and the workers'. The
// child reads the standard OTEL_* variables (otelenv, as toolworker does),
// so a traced child records and exports its spans as a deployed worker
// would.

// serveWorkers is the child: it connects to the server at url with the
// seed file nkey and obeys the commands read from stdin, one a line, each
// answered by a line "ok" or "error: …":
//
//	start REPLICAS SLOTS IDEMPOTENT TAKES PREFIX   start REPLICAS workers of SLOTS
//	                                               slots serving lookup (workerOpts;
//	                                               PREFIX "-" for the default)
//	stop                                    stop them
//	flush                                   export the spans recorded so far
//
// It ends when stdin closes.
func serveWorkers(url, nkey string) error {
	ctx := context.Background()
	tp, err := otelenv.New(ctx, os.Getenv, "offload-bench-worker")
	if err != nil {
		return err
	}
	defer func() {
		sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		_ = tp.Shutdown(sctx)
		cancel()
	}()
	ep := endpoint{url: url, nkey: nkey}
	var running []*offloadWorker
	defer func() { stopBenchWorkers(ctx, running) }()
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		f := strings.Fields(in.Text())
		var err error
		switch {
		case len(f) == 6 && f[0] == "start":
			var n, slots int
			var o workerOpts
			n, err = strconv.Atoi(f[1])
			if err == nil {
				slots, err = strconv.Atoi(f[2])
			}
			if err == nil {
				o.idempotent, err = strconv.ParseBool(f[3])
			}
			if err == nil {
				o.takes, err = time.ParseDuration(f[4])
			}
			if f[5] != "-" {
				o.prefix = f[5]
			}
			if err == nil {
				var ws []*offloadWorker
				ws, err = startBenchWorkers(ctx, ep, n, slots, o, tp.TracerProvider)
				running = append(running, ws...)
			}
		case len(f) == 1 && f[0] == "stop":
			stopBenchWorkers(ctx, running)
			running = nil
		case len(f) == 1 && f[0] == "flush":
			if sdk, ok := tp.TracerProvider.(interface{ ForceFlush(context.Context) error }); ok {
				fctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				err = sdk.ForceFlush(fctx)
				cancel()
			}
		default:
			err = fmt.Errorf("unknown command %q", in.Text())
		}
		if err != nil {
			fmt.Printf("error: %v\n", err)
		} else {
			fmt.Println("ok")
		}
	}
	return in.Err()
}

// workerProcess is a child process running bench workers.
type workerProcess struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	stdout *bufio.Reader
}

// startWorkerProcess starts a child process of workers for ep, with env
// added to this process's environment (the OTEL_* variables of a traced
// one).
func startWorkerProcess(ctx context.Context, ep endpoint, env ...string) (*workerProcess, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, exe, "-bench-worker", ep.url, "-bench-worker-nkey", ep.nkey)
	cmd.Env = append(withoutOTEL(os.Environ()), env...)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	return &workerProcess{cmd: cmd, stdin: stdin, stdout: bufio.NewReader(stdout)}, nil
}

// withoutOTEL returns env without the OTEL_* variables: a child's tracing
// is what its section gives it, not what the bench was run with.
func withoutOTEL(env []string) []string {
	out := env[:0:0]
	for _, kv := range env {
		if !strings.HasPrefix(kv, "OTEL_") {
			out = append(out, kv)
		}
	}
	return out
}

// do sends the child one command and waits for its answer.
func (p *workerProcess) do(command string) error {
	if _, err := fmt.Fprintln(p.stdin, command); err != nil {
		return fmt.Errorf("worker process: %s: %w", command, err)
	}
	line, err := p.stdout.ReadString('\n')
	if err != nil {
		return fmt.Errorf("worker process: %s: %w", command, err)
	}
	if line = strings.TrimSpace(line); line != "ok" {
		return fmt.Errorf("worker process: %s: %s", command, line)
	}
	return nil
}

// start starts replicas workers of slots slots each in the child.
func (p *workerProcess) start(replicas, slots int, o workerOpts) error {
	prefix := o.prefix
	if prefix == "" {
		prefix = "-"
	}
	return p.do(fmt.Sprintf("start %d %d %t %s %s", replicas, slots, o.idempotent, o.takes, prefix))
}

// cpu returns the CPU time the child has used.
func (p *workerProcess) cpu() time.Duration { return procCPU(p.cmd.Process.Pid) }

// close ends the child and waits for it.
func (p *workerProcess) close() {
	_ = p.stdin.Close()
	done := make(chan struct{})
	go func() { _ = p.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		_ = p.cmd.Process.Kill()
		<-done
	}
}

// childSys is offload's path with its workers in a child process: the
// agent side (dispatcher and toolset) in this process, traced as its
// system is, the workers as o says; recv, when set, is the receiver its
// spans are exported to.
type childSys struct {
	s    *offloadSystem
	wp   *workerProcess
	o    workerOpts
	recv *receiverProcess
}

func (c childSys) start(ctx context.Context, replicas, slots int) error {
	o := c.o
	o.prefix = c.s.prefix
	if err := c.wp.start(replicas, slots, o); err != nil {
		return err
	}
	return c.s.waitTool(ctx)
}

func (c childSys) stop(context.Context) { _ = c.wp.do("stop") }

func (c childSys) call(ctx context.Context) (time.Duration, error) { return 0, c.s.call(ctx) }

// childCPU is the CPU the workers' process has used, and the receiver's.
func (c childSys) childCPU() []time.Duration {
	if c.recv == nil {
		return []time.Duration{c.wp.cpu()}
	}
	return []time.Duration{c.wp.cpu(), c.recv.cpu()}
}

// flush exports the spans both processes recorded, within the measured
// time of the rounds that recorded them.
func (c childSys) flush(ctx context.Context) {
	if f, ok := c.s.tp.(interface{ ForceFlush(context.Context) error }); ok {
		fctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		_ = f.ForceFlush(fctx)
		cancel()
	}
	_ = c.wp.do("flush")
}
