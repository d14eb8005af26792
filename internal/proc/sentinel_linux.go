//go:build linux

package proc

import (
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// sentinelName is the argv[0] a [Reaper] starts its sentinel with:
// [SentinelMain] recognises it, and ps shows it.
const sentinelName = "offload-reaper-sentinel"

// sentinelReady is what a sentinel writes on its stdout once it watches;
// readyWithin bounds the wait for it.
const (
	sentinelReady = "ready\n"
	readyWithin   = 10 * time.Second
)

// idLen is the length of a reaper's ID, hex: the prefix of the scopes of
// its commands.
const idLen = 16

// SentinelMain runs the process as a [Reaper]'s sentinel, and exits, when
// it was started as one; otherwise it returns at once. A reaper starts its
// sentinel by running its own binary again (/proc/self/exe), so every
// binary that makes a Reaper calls SentinelMain first thing in main (a
// test binary, in TestMain); a binary that does not is found out at its
// first command, which then fails (see [Reaper]).
func SentinelMain() {
	if len(os.Args) != 3 || os.Args[0] != sentinelName {
		return
	}
	os.Exit(sentinel(os.Args[1], os.Args[2], os.Stdin, os.Stdout, os.Stderr))
}

// sentinel is a sentinel's whole life: it says it is ready on ready, waits
// until watch reads EOF (every copy of the write end closed: the reaper's
// process ended, however), then kills every process whose scope is one of
// the reaper id's ([killScopes]) and returns the exit code. It ignores the
// signals a terminal, a supervisor or a group kill of its parent's group
// would send it, so that it outlives its parent and does its work.
func sentinel(id, parent string, watch io.Reader, ready io.WriteCloser, stderr io.Writer) int {
	log := slog.New(slog.NewJSONHandler(stderr, nil))
	if len(id) != idLen {
		log.Error("proc: a reaper's sentinel needs its reaper's ID", "id", id)
		return 2
	}
	if _, err := hex.DecodeString(id); err != nil {
		log.Error("proc: a reaper's sentinel needs its reaper's ID", "id", id, "err", err)
		return 2
	}
	signal.Ignore(syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGTTIN, syscall.SIGTTOU, syscall.SIGPIPE)
	// Nothing to read in it (its environment is empty), but under a
	// worker that is not root its commands are its user: none may attach
	// to it (ptrace) and make it signal what it would not.
	_ = NoDump()
	if _, err := io.WriteString(ready, sentinelReady); err != nil {
		return 1
	}
	_ = ready.Close()
	_, _ = io.Copy(io.Discard, watch) // until EOF: the reaper's process is gone
	if n := killScopes(id); n > 0 {
		log.Warn("proc: the process that ran these commands ended without ending them; its reaper's sentinel killed them",
			"process", parent, "killed", n)
	}
	return 0
}

// killScopes kills (SIGKILL) every process whose [ScopeEnv] is one of the
// reaper id's (it begins "<id>."), and the process group each leads, pass
// after pass until one finds none left: a process forked meanwhile
// inherits its parent's scope. It returns how many processes it found.
//
// Each process is held by a pidfd from before its environment is read
// until it is signalled, so that a pid reused meanwhile is never
// signalled; the group of a process so signalled is its own (the kernel
// does not reuse a pid while a process group of that ID has members).
// Kernels before 5.3 have no pidfd: kill(2) then, as the reaper's sweep
// does.
func killScopes(id string) int {
	prefix := id + "."
	self := os.Getpid()
	killed := map[int]bool{}
	for range maxSweeps {
		entries, err := os.ReadDir("/proc")
		if err != nil {
			break
		}
		found := 0
		for _, e := range entries {
			pid, err := strconv.Atoi(e.Name())
			if err != nil || pid == self || killed[pid] {
				continue
			}
			if killTagged(pid, prefix) {
				killed[pid] = true
				found++
			}
		}
		if found == 0 {
			break
		}
	}
	return len(killed)
}

// killTagged kills pid and the process group it leads when its scope
// begins with prefix, and reports whether it did.
func killTagged(pid int, prefix string) bool {
	fd, err := unix.PidfdOpen(pid, 0)
	switch {
	case err == nil:
		defer unix.Close(fd)
	case errors.Is(err, unix.ENOSYS):
		fd = -1
	default:
		return false // gone
	}
	scope, ok := scopeEnv(pid)
	if !ok || !strings.HasPrefix(scope, prefix) {
		return false
	}
	if fd >= 0 {
		if unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0) != nil {
			return false // it ended (its pid may be another's now)
		}
	} else if syscall.Kill(pid, syscall.SIGKILL) != nil {
		return false
	}
	_ = syscall.Kill(-pid, syscall.SIGKILL) // ESRCH: it leads no group
	return true
}

// sentinelStart starts the sentinel of the reaper of ID id, whose process
// is pid: its own binary again (/proc/self/exe), in a process group of its
// own, with an empty environment, stdin the read end of a pipe whose only
// write end is returned (kept by the reaper, never inherited: close on
// exec), stderr the process's. It returns when the sentinel said it is
// ready, or fails.
func sentinelStart(id string, pid int) (p *os.Process, watch *os.File, err error) {
	watchR, watchW, err := os.Pipe()
	if err != nil {
		return nil, nil, fmt.Errorf("proc: the reaper's sentinel: pipe: %w", err)
	}
	defer watchR.Close()
	readyR, readyW, err := os.Pipe()
	if err != nil {
		watchW.Close()
		return nil, nil, fmt.Errorf("proc: the reaper's sentinel: pipe: %w", err)
	}
	defer readyR.Close()
	p, err = os.StartProcess("/proc/self/exe", []string{sentinelName, id, strconv.Itoa(pid)}, &os.ProcAttr{
		Env:   []string{},
		Files: []*os.File{watchR, readyW, os.Stderr},
		Sys:   &syscall.SysProcAttr{Setpgid: true},
	})
	readyW.Close()
	if err != nil {
		watchW.Close()
		return nil, nil, fmt.Errorf("proc: the reaper's sentinel: %w", err)
	}
	_ = readyR.SetReadDeadline(time.Now().Add(readyWithin))
	got := make([]byte, len(sentinelReady))
	if _, err = io.ReadFull(readyR, got); err == nil && string(got) != sentinelReady {
		err = fmt.Errorf("it said %q", got)
	}
	if err != nil {
		watchW.Close()
		_ = p.Kill()
		_, _ = p.Wait()
		return nil, nil, fmt.Errorf("proc: the reaper's sentinel did not start (does the binary call proc.SentinelMain first in main?): %w", err)
	}
	return p, watchW, nil
}
