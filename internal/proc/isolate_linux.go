//go:build linux

package proc

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// NoDump makes the process non-dumpable (prctl PR_SET_DUMPABLE 0): its
// /proc/<pid>/environ, mem, maps and fds become root's, and ptrace is
// refused, so a command it runs (a tool, as the same user) cannot read the
// passwords and API keys in its environment or memory. /proc/<pid>/cmdline
// stays readable by everyone: no secret belongs in argv. A process with
// CAP_SYS_PTRACE (root, in most containers) still reads it all. The
// commands themselves are dumpable again after their exec (the kernel's
// rule), which is what lets the reaper read their environment.
func NoDump() error {
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return fmt.Errorf("proc: prctl(PR_SET_DUMPABLE, 0): %w", err)
	}
	return nil
}

// Dumpable reports whether the process is dumpable (see [NoDump]).
func Dumpable() (bool, error) {
	v, err := unix.PrctlRetInt(unix.PR_GET_DUMPABLE, 0, 0, 0, 0)
	if err != nil {
		return false, fmt.Errorf("proc: prctl(PR_GET_DUMPABLE): %w", err)
	}
	return v != 0, nil
}
