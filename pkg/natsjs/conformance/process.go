package conformance

import (
	"context"
	"fmt"
	"io"
	"os/exec"
	"syscall"
	"time"
)

// process is the worker under test when the kit starts it (Config.Exec):
// `sh -c "exec <command>"`, so that the signals reach the worker itself,
// in a process group of its own.
type process struct {
	cmd     *exec.Cmd
	started time.Time
	done    chan struct{}
}

// startProcess starts the command; it runs until it exits or is killed.
func startProcess(command string, out io.Writer) (*process, error) {
	cmd := exec.Command("sh", "-c", "exec "+command) //nolint:noctx // the worker under test outlives any one context: it is ended by signals and kill
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %q: %w", command, err)
	}
	p := &process{cmd: cmd, started: time.Now(), done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// signal sends sig to the worker.
func (p *process) signal(sig syscall.Signal) error { return p.cmd.Process.Signal(sig) }

// kill kills the worker's whole process group and waits for its exit.
func (p *process) kill() {
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	<-p.done
}

// exited waits up to timeout for the worker's exit.
func (p *process) exited(ctx context.Context, timeout time.Duration) bool {
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case <-p.done:
		return true
	case <-timer.C:
	case <-ctx.Done():
	}
	return false
}

// stop ends the worker as an operator does: SIGTERM, then SIGKILL after
// timeout.
func (p *process) stop(ctx context.Context, timeout time.Duration) {
	_ = p.signal(syscall.SIGTERM)
	if !p.exited(ctx, timeout) {
		p.kill()
	}
}

// startWorker starts the worker under test again and waits until it
// advertises the tool.
func (c *checker) startWorker(ctx context.Context) error {
	p, err := startProcess(c.cfg.Exec, c.cfg.ExecOutput)
	if err != nil {
		return err
	}
	c.proc = p
	return c.awaitAdvertised(ctx)
}

// awaitAdvertised waits until the started worker wrote a registry entry of
// the tool.
func (c *checker) awaitAdvertised(ctx context.Context) error {
	wctx, cancel := context.WithTimeout(ctx, c.cfg.Timeout)
	defer cancel()
	go func() { // ends with wctx
		select {
		case <-c.proc.done:
			cancel()
		case <-wctx.Done():
		}
	}()
	if len(c.reg.current(wctx, c.proc.started)) > 0 {
		return nil
	}
	select {
	case <-c.proc.done:
		return fmt.Errorf("the worker (%s) exited: %s", c.cfg.Exec, c.proc.cmd.ProcessState)
	default:
	}
	return fmt.Errorf("the worker (%s) wrote no registry entry of %s within %s", c.cfg.Exec, c.cfg.Tool, c.cfg.Timeout)
}

// awaitBucket waits until the registry bucket exists (a worker started on
// a new server may create it).
func (c *checker) awaitBucket(ctx context.Context) error {
	wctx, cancel := context.WithTimeout(ctx, c.cfg.Timeout)
	defer cancel()
	tick := time.NewTicker(pollEvery)
	defer tick.Stop()
	for {
		_, err := c.js.KeyValue(wctx, c.names.RegistryBucket)
		if err == nil {
			return nil
		}
		select {
		case <-tick.C:
		case <-c.proc.done:
			return fmt.Errorf("the worker (%s) exited: %s", c.cfg.Exec, c.proc.cmd.ProcessState)
		case <-wctx.Done():
			return fmt.Errorf("registry bucket %s: %w", c.names.RegistryBucket, err)
		}
	}
}
