package proc_test

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/offload-dev/offload/internal/offloadtest"
	"github.com/offload-dev/offload/internal/proc"
)

// TestMain runs the tests with goleak; the test binary is also a reaper's
// sentinel (proc.SentinelMain) and the process the sentinel tests kill
// (orphanParent).
func TestMain(m *testing.M) {
	proc.SentinelMain()
	if os.Getenv(orphanParentEnv) != "" {
		os.Exit(orphanParent())
	}
	offloadtest.WrapTestMain(m)
}

// orphanParentEnv makes the test binary run orphanParent.
const orphanParentEnv = "OFFLOAD_PROC_TEST_ORPHAN_PARENT"

// orphanScript is the command orphanParent leaves running: a shell (the
// leader of its process group) with a child in the background, a child
// with an empty environment (no scope: found only as a member of the
// group) and a child that left the group (setsid: found only by its
// scope). It prints "pids <leader> <background> <no environment>
// <detached>".
const orphanScript = `sleep 600 & b=$!
env -i /bin/sleep 600 & e=$!
setsid sleep 600 </dev/null >/dev/null 2>&1 & d=$!
echo "pids $$ $b $e $d"
wait`

// orphanParent is the process whose commands must not outlive it: with a
// reaper, as the default tool user when root, it runs one command to its
// end (the reaper's sweep, which must spare the sentinel), then starts
// orphanScript, whose pids it prints, and waits for its stdin to end; the
// tests SIGKILL it first.
func orphanParent() int {
	r, err := proc.NewReaper()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	u, err := proc.ToolUser(proc.DefaultToolUser)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	rn := proc.Runner{Reaper: r, User: u}
	if err := rn.Run(exec.Command("/bin/sh", "-c", "sleep 600 & exit 0"), io.Discard, os.Stderr, time.Second); err != nil {
		fmt.Fprintln(os.Stderr, "the first command:", err)
		return 1
	}
	go func() {
		err := rn.Run(exec.Command("/bin/sh", "-c", orphanScript), os.Stdout, os.Stderr, time.Second)
		fmt.Fprintln(os.Stderr, "the command ended:", err)
	}()
	_, _ = io.Copy(io.Discard, os.Stdin)
	return 0
}
