package proc

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"
	"time"
)

// ErrOutputHeld is returned (wrapped) by [Run] when something the command
// started kept its output open past the drain delay even after the process
// group was killed (a child that left the group, e.g. with setsid). The
// output read so far is kept.
var ErrOutputHeld = errors.New("proc: output still held open after the command ended")

// Run starts cmd in its own process group with stdout and stderr copied to
// the given writers, and waits for it. When the command exits, times out or
// ctx (cmd's context, from exec.CommandContext) is cancelled, the whole
// process group is killed, so that background children (`nohup sleep 9999
// &`) do not outlive the call; then the output is drained for at most
// drainDelay. It returns cmd.Wait's error (an *exec.ExitError for a non-zero
// exit), or an error wrapping [ErrOutputHeld].
//
// cmd.Stdout, cmd.Stderr and cmd.SysProcAttr must be unset; cmd.Cancel, set
// by exec.CommandContext, is replaced by a group kill.
//
// Run kills the process group only: a child that left it (setsid) is not
// killed. [Reaper.Run] kills those too.
func Run(cmd *exec.Cmd, stdout, stderr io.Writer, drainDelay time.Duration) error {
	return (*Reaper)(nil).Run(cmd, stdout, stderr, drainDelay)
}

// Run is [Run] with every descendant of the command killed when it ends,
// also those that left its process group (see [Reaper]). A nil reaper
// kills the process group only.
func (r *Reaper) Run(cmd *exec.Cmd, stdout, stderr io.Writer, drainDelay time.Duration) error {
	return Runner{Reaper: r}.Run(cmd, stdout, stderr, drainDelay)
}

// Runner runs the commands of tools. Its zero value is [Run]'s.
type Runner struct {
	// Reaper, when set, kills every descendant of a command when it
	// ends, also those that left its process group (see [Reaper]).
	Reaper *Reaper
	// User, when set, is the user the commands run as, with every
	// privilege dropped (see [User.Start]); see [ToolUser].
	User *User
}

// Run is [Run] through the runner's reaper, as its user.
func (rn Runner) Run(cmd *exec.Cmd, stdout, stderr io.Writer, drainDelay time.Duration) error {
	return rn.RunStarted(cmd, stdout, stderr, drainDelay, nil)
}

// RunStarted is [Runner.Run] telling started, when set, the command's pid
// once it started (not called when it could not start): a long-lived
// command (an MCP server) is then known to its caller, who may kill its
// process group ([KillGroup]) to end it.
func (rn Runner) RunStarted(cmd *exec.Cmd, stdout, stderr io.Writer, drainDelay time.Duration, started func(pid int)) error {
	r := rn.Reaper
	outR, outW, err := os.Pipe()
	if err != nil {
		return fmt.Errorf("proc: pipe: %w", err)
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		outR.Close()
		outW.Close()
		return fmt.Errorf("proc: pipe: %w", err)
	}
	cmd.Stdout, cmd.Stderr = outW, errW
	// exec.CommandContext sets Cancel; a plain exec.Command must keep it nil.
	setGroup(cmd, cmd.Cancel != nil)
	// A Stdin that is not a file is copied by a goroutine Wait waits for:
	// bound that wait when the command exits without reading it all.
	if cmd.WaitDelay == 0 {
		cmd.WaitDelay = drainDelay
	}
	scope := r.newScope()
	if scope != "" {
		env := cmd.Env
		if env == nil {
			env = cmd.Environ()
		}
		cmd.Env = append(env, ScopeEnv+"="+scope)
	}
	err = r.start(cmd, scope, rn.User)
	// The child has its copies; ours must go so that EOF comes when the
	// last holder in the group dies.
	outW.Close()
	errW.Close()
	if err != nil {
		outR.Close()
		errR.Close()
		return err
	}
	if started != nil {
		started(cmd.Process.Pid)
	}
	var wg sync.WaitGroup
	for _, p := range []struct {
		r *os.File
		w io.Writer
	}{{outR, stdout}, {errR, stderr}} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _ = io.Copy(p.w, p.r)
		}()
	}
	waitErr := cmd.Wait()
	// The leader is gone; its group may not be, nor what left it.
	killGroup(cmd.Process.Pid)
	r.ended(cmd.Process.Pid, scope)
	if errors.Is(waitErr, exec.ErrWaitDelay) {
		// Only stdin was left unread: not a failure of the command.
		waitErr = nil
	}

	drained := make(chan struct{})
	go func() {
		wg.Wait()
		close(drained)
	}()
	timer := time.NewTimer(drainDelay)
	defer timer.Stop()
	select {
	case <-drained:
	case <-timer.C:
		// Closing the read ends ends the copies at once.
		outR.Close()
		errR.Close()
		<-drained
		if waitErr == nil {
			waitErr = fmt.Errorf("%w (after %s)", ErrOutputHeld, drainDelay)
		}
	}
	outR.Close()
	errR.Close()
	return waitErr
}
