//go:build !linux

package proc

import (
	"errors"
	"os/exec"
)

// ScopeEnv is the environment variable of the Linux reaper.
const ScopeEnv = "OFFLOAD_TASK_SCOPE"

// Reaper is the Linux reaper of detached descendants; elsewhere commands
// are killed by process group only.
type Reaper struct{}

// NewReaper is not supported outside Linux.
func NewReaper() (*Reaper, error) {
	return nil, errors.New("proc: no child subreaper outside Linux: detached descendants are not killed")
}

func (r *Reaper) start(cmd *exec.Cmd, _ string, u *User) error { return u.Start(cmd) }
func (r *Reaper) ended(int, string)                            {}
func (r *Reaper) newScope() string                             { return "" }
