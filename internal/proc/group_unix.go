//go:build unix

package proc

import (
	"os/exec"
	"syscall"
)

// setGroup runs cmd in its own process group and, for a command made with
// exec.CommandContext, makes cancelling its context kill the whole group.
func setGroup(cmd *exec.Cmd, withContext bool) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if withContext {
		cmd.Cancel = func() error {
			killGroup(cmd.Process.Pid)
			return nil
		}
	}
}

// killGroup kills the process group led by pid. The kernel does not reuse a
// pid while a process group of that ID has members, so a live group is
// always ours; an empty group gives ESRCH, which is ignored.
func killGroup(pid int) {
	_ = syscall.Kill(-pid, syscall.SIGKILL)
}

// KillGroup kills the process group led by pid (SIGKILL): a command
// started by [Runner.RunStarted] ends with everything in its group.
func KillGroup(pid int) { killGroup(pid) }
