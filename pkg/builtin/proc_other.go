//go:build !unix

package builtin

import "os/exec"

// killGroupOnCancel keeps exec's default: cancelling kills the process only.
func killGroupOnCancel(*exec.Cmd) {}
