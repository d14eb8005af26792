package proc_test

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/offload-dev/offload/internal/offloadtest"
	"github.com/offload-dev/offload/internal/proc"
	"github.com/offload-dev/offload/internal/proctest"
)

// TestSentinelToolUser (issue 39): the commands a root process runs as
// the tool user, with what they left running (a background child, one
// with an empty environment, one that left their process group), die when
// the process is SIGKILLed; a process of the same user with another
// reaper's scope does not.
func TestSentinelToolUser(t *testing.T) {
	u := toolUser(t)
	t.Parallel()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	killParent(t, exec.Command(self), nil, u)
}

// TestSentinelNotRoot (issue 39): the same for a process that is not
// root, whose commands run as itself (under root, the test runs the
// process as the default tool user).
func TestSentinelNotRoot(t *testing.T) {
	t.Parallel()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	if os.Geteuid() != 0 {
		killParent(t, exec.Command(self), nil, nil)
		return
	}
	u := toolUser(t)
	// A copy of the test binary the tool user can run (its build
	// directory is root's alone).
	bin := filepath.Join(proctest.ToolDir(t), "proc.test")
	b, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, b, 0o755); err != nil {
		t.Fatal(err)
	}
	killParent(t, exec.Command(bin), u, u)
}

// killParent runs cmd (the test binary) as orphanParent, as as (nil: as
// the test's user), whose commands run as cmdUser (nil: the test's user);
// it SIGKILLs it once its commands run and checks that they and its
// sentinel are gone, and that a process with another reaper's scope is
// not.
func killParent(t *testing.T, cmd *exec.Cmd, as, cmdUser *proc.User) {
	t.Helper()
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), orphanParentEnv + "=1"}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	defer stdin.Close()
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := as.Start(cmd); err != nil {
		t.Fatal(err)
	}
	killed := false
	t.Cleanup(func() {
		if !killed {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
	line := make(chan string, 1)
	go func() {
		s, _ := bufio.NewReader(stdout).ReadString('\n')
		line <- s
	}()
	got := offloadtest.WaitOrTimeout(t, line, "the command's pids")
	f := strings.Fields(got)
	if len(f) != 5 || f[0] != "pids" {
		t.Fatalf("the process said %q; stderr:\n%s", got, stderr.String())
	}
	var pids []int
	for _, s := range f[1:] {
		pid, err := strconv.Atoi(s)
		if err != nil {
			t.Fatal(err)
		}
		pids = append(pids, pid)
		t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) })
	}
	wantUID := os.Geteuid()
	if cmdUser != nil {
		wantUID = int(cmdUser.UID)
	}
	for _, pid := range pids {
		if uid := uidOf(t, pid); uid != wantUID {
			t.Errorf("command process %d runs as uid %d, want %d", pid, uid, wantUID)
		}
	}
	sentinels := childrenNamed(cmd.Process.Pid, "offload-reaper-sentinel")
	if len(sentinels) != 1 {
		t.Fatalf("sentinels of the process: %v, want one", sentinels)
	}
	// Another reaper's command, of the same user: not this sentinel's.
	other := exec.Command("/bin/sleep", "600")
	other.Env = []string{proc.ScopeEnv + "=0123456789abcdef.0123"}
	if err := cmdUser.Start(other); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = other.Process.Kill(); _ = other.Wait() })

	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	killed = true
	offloadtest.WaitDead(t, sentinels[0])
	for _, pid := range pids {
		offloadtest.WaitDead(t, pid)
	}
	if t.Failed() {
		t.Logf("the process's stderr:\n%s", stderr.String())
	}
	if state := stateOf(other.Process.Pid); state == "" || state == "Z" {
		t.Errorf("another reaper's command was killed (state %q)", state)
	}
	if !strings.Contains(stderr.String(), "its reaper's sentinel killed them") {
		t.Errorf("the sentinel did not say what it did; stderr:\n%s", stderr.String())
	}
}

// uidOf returns the real user ID of pid.
func uidOf(t *testing.T, pid int) int {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for l := range strings.SplitSeq(string(b), "\n") {
		if rest, ok := strings.CutPrefix(l, "Uid:"); ok {
			uid, err := strconv.Atoi(strings.Fields(rest)[0])
			if err != nil {
				t.Fatal(err)
			}
			return uid
		}
	}
	t.Fatalf("no Uid in %s", b)
	return 0
}

// stateOf returns the state of pid ("S", "R", "Z"…; "" when gone).
func stateOf(pid int) string {
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	i := bytes.LastIndexByte(stat, ')')
	if err != nil || i < 0 {
		return ""
	}
	if f := strings.Fields(string(stat[i+1:])); len(f) > 0 {
		return f[0]
	}
	return ""
}

// childrenNamed returns the children of parent whose argv[0] is name.
func childrenNamed(parent int, name string) []int {
	entries, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		i := bytes.LastIndexByte(stat, ')')
		if f := strings.Fields(string(stat[i+1:])); i < 0 || len(f) < 2 || f[1] != strconv.Itoa(parent) {
			continue
		}
		argv, _ := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if a0, _, _ := bytes.Cut(argv, []byte{0}); string(a0) == name {
			out = append(out, pid)
		}
	}
	return out
}
