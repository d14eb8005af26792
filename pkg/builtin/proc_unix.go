//go:build unix

package builtin

import (
	"os/exec"
	"syscall"
)

// killGroupOnCancel runs cmd in its own process group and makes cancelling
// its context kill the whole group, so that children it started die too.
func killGroupOnCancel(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error {
		return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
}
