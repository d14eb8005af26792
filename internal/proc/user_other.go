//go:build !linux

package proc

import "os/exec"

// Start starts cmd (cmd.Start) when u is nil. Running commands as another
// user with every privilege dropped is supported on Linux only: outside
// it, a root process refuses to start them (see [ToolUser]).
func (u *User) Start(cmd *exec.Cmd) error {
	if u == nil {
		return cmd.Start()
	}
	return errUnsupported
}

// CheckDir checks nothing for a nil u (see the Linux version).
func (u *User) CheckDir(string, bool) error {
	if u == nil {
		return nil
	}
	return errUnsupported
}

// CheckExec checks nothing for a nil u (see the Linux version).
func (u *User) CheckExec(string) error {
	if u == nil {
		return nil
	}
	return errUnsupported
}

// dropSupported is false: see [User.Start].
const dropSupported = false
