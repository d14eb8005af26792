//go:build unix

package offloadtest

import (
	"bytes"
	"os"
	"strconv"
	"syscall"
	"testing"
)

// WaitDead waits until the process pid no longer runs (gone, or a zombie
// nobody reaps: it runs nothing any more). Another process's death sends
// this one no signal, so it polls. After [Wait] it fails the test
// (without stopping it, so that a caller checking several processes
// names each) and kills the process, so that it does not outlive the
// test.
func WaitDead(tb testing.TB, pid int) {
	tb.Helper()
	if ok, _ := poll(Wait, func() bool { return !alive(pid) }); !ok {
		_ = syscall.Kill(pid, syscall.SIGKILL)
		tb.Errorf("process %d still runs after %v", pid, Wait)
	}
}

// alive reports whether pid names a process that runs (not a zombie).
func alive(pid int) bool {
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		if os.IsNotExist(err) {
			_, err := os.Stat("/proc/self/stat")
			if err == nil {
				return false // /proc is there: the process is gone
			}
		}
		return syscall.Kill(pid, 0) == nil // no /proc (macOS, BSD)
	}
	// "pid (comm) S ...": the state follows the last ')'; Z is a zombie,
	// X a dead one.
	i := bytes.LastIndexByte(stat, ')')
	return i < 0 || len(stat) < i+3 || (stat[i+2] != 'Z' && stat[i+2] != 'X')
}
