//go:build !unix

package proc

import "os/exec"

// setGroup keeps exec's default: cancelling kills the process only.
func setGroup(*exec.Cmd, bool) {}

// killGroup does nothing where process groups do not exist.
func killGroup(int) {}

// KillGroup kills the process group led by pid (not on this system).
func KillGroup(pid int) { killGroup(pid) }
