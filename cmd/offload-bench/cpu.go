package main

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"syscall"
	"time"
)

// processCPU returns the CPU time (user and system) this process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// clockTick is the unit of the CPU times in /proc/<pid>/stat (USER_HZ,
// 100 on every Linux platform Go supports).
const clockTick = 10 * time.Millisecond

// cpu returns the CPU time (user and system) the server's process has
// used, from /proc; zero where /proc is not there, or for a nil p.
func (p *serverProcess) cpu() time.Duration {
	if p == nil {
		return 0
	}
	return procCPU(p.cmd.Process.Pid)
}

// procCPU returns the CPU time (user and system) process pid has used,
// from /proc; zero where /proc is not there.
func procCPU(pid int) time.Duration {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// The command name, in parentheses, may hold spaces: the fields
	// counted start after its closing parenthesis, at field 3 (state).
	i := bytes.LastIndexByte(data, ')')
	if i < 0 {
		return 0
	}
	f := bytes.Fields(data[i+1:])
	const utime, stime = 14 - 3, 15 - 3 // fields 14 and 15, 1-based
	if len(f) <= stime {
		return 0
	}
	u, err1 := strconv.ParseInt(string(f[utime]), 10, 64)
	s, err2 := strconv.ParseInt(string(f[stime]), 10, 64)
	if err1 != nil || err2 != nil {
		return 0
	}
	return time.Duration(u+s) * clockTick
}
