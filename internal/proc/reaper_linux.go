//go:build linux

package proc

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// ScopeEnv is the environment variable that ties a command's descendants
// to its task: [Reaper.Run] gives each command a fresh value, which every
// descendant inherits (however it detaches: setsid, a double fork, nohup).
const ScopeEnv = "OFFLOAD_TASK_SCOPE"

// maxSweeps bounds the passes of one sweep (each pass kills the orphans
// found; their own children are orphaned to the reaper and found by the
// next).
const maxSweeps = 64

// Reaper kills every descendant of a command when the command ends, however
// it detached from the command's process group, and when the process
// itself ends, however (SIGKILL included). It makes the process a child
// subreaper (prctl PR_SET_CHILD_SUBREAPER): a descendant whose parent
// exits (a double fork, `setsid sleep 600 &`) is reparented to this process
// instead of init. When a command run with [Reaper.Run] ends (it exited,
// timed out or was cancelled), its process group is killed, then every
// child of this process that is not the leader of a running command and
// whose environment carries the ended command's scope ([ScopeEnv]), or no
// live command's scope, or cannot be read, is killed (SIGKILL) and reaped,
// until none is left.
//
// Nothing runs in a process once it is SIGKILLed: its commands would go on
// (an MCP server with a call pending does not end at the EOF of its
// stdin), reparented to init. So before its first command a reaper starts
// its sentinel, a process of its own that outlives it: the process's own
// binary again ([SentinelMain]), as the process's user, in a process group
// of its own, with an empty environment, blocked reading a pipe whose only
// write end the reaper holds. However the process ends, the kernel closes
// that end; the sentinel reads EOF, kills every process whose scope is one
// of this reaper's (each scope begins with the reaper's ID) with the
// process group it leads, and exits. A sentinel that ended (killed) is
// started again before the next command; one that cannot start fails the
// command, which would otherwise outlive a SIGKILLed process.
//
// The subreaper is process-wide: a process with a Reaper must start its
// children through it (the toolworker and the agent on the embedded
// default do), or a sweep may reap a child it started otherwise. The
// commands may run as another user ([Runner.User]): a root process
// signals them, and reads their scope as their owner when it cannot as
// root. Its limits: a descendant of another user that the process may not
// signal (a setuid program, under a process that is not root) cannot be
// killed; work handed to another service (systemd-run, at, cron, a
// daemon over a socket) is not a descendant; after the process itself
// ended, a descendant that both cleared its environment and left its
// command's process group is not found, and a process of the same user
// (the process's own user, when it is not root and runs its commands as
// itself) may have killed the sentinel first; a descendant that forks
// faster than the sweeps kill it may outlast maxSweeps passes.
type Reaper struct {
	self int
	id   string // hex, idLen long: the prefix of its commands' scopes

	mu      sync.Mutex
	leaders map[int]string  // pid of a running command → its scope
	live    map[string]bool // scopes of running commands
	// sentinel is the pid of the sentinel (0: none yet); watch the write
	// end of the pipe it reads, closed by the kernel when the process
	// ends.
	sentinel int
	watch    *os.File
}

// NewReaper makes the process a child subreaper and returns its reaper.
func NewReaper() (*Reaper, error) {
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		return nil, fmt.Errorf("proc: prctl(PR_SET_CHILD_SUBREAPER): %w", err)
	}
	return &Reaper{self: os.Getpid(), id: randomHex(idLen / 2), leaders: map[int]string{}, live: map[string]bool{}}, nil
}

// start starts cmd as a command of scope, as u ([User.Start]): under the
// reaper's lock, so that a sweep never takes a command just forked for an
// orphan, and once the reaper's sentinel runs.
func (r *Reaper) start(cmd *exec.Cmd, scope string, u *User) error {
	if r == nil {
		return u.Start(cmd)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.watched(); err != nil {
		return err
	}
	if err := u.Start(cmd); err != nil {
		return err
	}
	r.leaders[cmd.Process.Pid] = scope
	r.live[scope] = true
	return nil
}

// watched makes sure the reaper's sentinel runs: it starts one when there
// is none yet or the last one ended (reaped here). Called under r.mu.
func (r *Reaper) watched() error {
	if r.sentinel != 0 {
		var ws syscall.WaitStatus
		if pid, err := syscall.Wait4(r.sentinel, &ws, syscall.WNOHANG, nil); pid == 0 && err == nil {
			return nil // it runs
		}
		r.watch.Close()
		r.sentinel, r.watch = 0, nil
	}
	p, watch, err := sentinelStart(r.id, r.self)
	if err != nil {
		return err
	}
	r.sentinel, r.watch = p.Pid, watch
	_ = p.Release() // waited for by pid (above), never through p
	return nil
}

// ended sweeps the descendants of the command whose scope ended.
func (r *Reaper) ended(pid int, scope string) {
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.leaders, pid)
	delete(r.live, scope)
	for range maxSweeps {
		if r.sweep(scope) == 0 {
			return
		}
	}
}

// sweep kills and reaps the orphans of scope (and those of no live
// scope) once; it returns how many it found.
func (r *Reaper) sweep(scope string) int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0
	}
	found := 0
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || r.leaders[pid] != "" || pid == r.sentinel {
			continue
		}
		ppid, zombie, ok := parentOf(pid)
		if !ok || ppid != r.self {
			continue
		}
		if !zombie {
			s, readable := scopeEnv(pid)
			if readable && s != scope && r.live[s] {
				continue // another running command's descendant
			}
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		found++
		var ws syscall.WaitStatus
		for {
			_, err := syscall.Wait4(pid, &ws, 0, nil)
			if !errors.Is(err, syscall.EINTR) {
				break
			}
		}
	}
	return found
}

// parentOf reads the parent and state of pid from /proc/<pid>/stat.
func parentOf(pid int) (ppid int, zombie, ok bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, false, false
	}
	// pid (comm) state ppid …: comm may hold spaces and parentheses.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, false, false
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 2 {
		return 0, false, false
	}
	ppid, err = strconv.Atoi(f[1])
	return ppid, f[0] == "Z", err == nil
}

// scopeEnv returns the ScopeEnv value of pid's environment, and whether
// the environment could be read. A process of another user (a command run
// as the tool user, [User]) is read as its owner when the reaper's process
// cannot read it as itself (root without CAP_SYS_PTRACE, in most
// containers): its environ is its owner's to read, as long as it is
// dumpable (every command is after its exec).
func scopeEnv(pid int) (string, bool) {
	path := "/proc/" + strconv.Itoa(pid) + "/environ"
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrPermission) {
		b, err = readAsOwner(pid, path)
	}
	if err != nil {
		return "", false
	}
	for kv := range bytes.SplitSeq(b, []byte{0}) {
		if v, ok := bytes.CutPrefix(kv, []byte(ScopeEnv+"=")); ok {
			return string(v), true
		}
	}
	return "", true
}

// readAsOwner reads path, a /proc entry of pid, with the filesystem
// credentials of pid's user and group ([onThreadAs]), which the kernel
// checks against pid's real, effective and saved IDs: all three must be
// the same.
func readAsOwner(pid int, path string) ([]byte, error) {
	uid, gid, err := owner(pid)
	if err != nil {
		return nil, err
	}
	var b []byte
	err = onThreadAs(uid, gid, func() error {
		var err error
		b, err = os.ReadFile(path)
		return err
	})
	return b, err
}

// owner returns the user and group of pid from /proc/<pid>/status, whose
// real, effective and saved IDs must agree.
func owner(pid int) (uid, gid uint32, err error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0, 0, err
	}
	ids := map[string]uint32{}
	for line := range strings.SplitSeq(string(b), "\n") {
		key, rest, ok := strings.Cut(line, ":")
		if !ok || (key != "Uid" && key != "Gid") {
			continue
		}
		f := strings.Fields(rest)
		if len(f) < 3 || f[0] != f[1] || f[0] != f[2] {
			return 0, 0, fmt.Errorf("proc: %d has %s %q: not one ID", pid, key, rest)
		}
		id, err := strconv.ParseUint(f[0], 10, 32)
		if err != nil {
			return 0, 0, fmt.Errorf("proc: %d: %s %q: %w", pid, key, rest, err)
		}
		ids[key] = uint32(id)
	}
	u, uok := ids["Uid"]
	g, gok := ids["Gid"]
	if !uok || !gok {
		return 0, 0, fmt.Errorf("proc: %d: no Uid or Gid in its status", pid)
	}
	return u, g, nil
}

// newScope returns a fresh scope value, "<reaper ID>.<random>" ("" without
// a reaper).
func (r *Reaper) newScope() string {
	if r == nil {
		return ""
	}
	return r.id + "." + randomHex(16)
}

// randomHex returns n random bytes, hex.
func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
