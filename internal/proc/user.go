package proc

import (
	"errors"
	"fmt"
	"os"
	"os/user"
	"strconv"
)

// DefaultToolUser is the user a root process runs its tools' commands as
// unless told otherwise (toolworker and agent --tool-user).
const DefaultToolUser = "nobody"

// ErrNoSuchUser is wrapped by the error of [ToolUser] for a name that is
// not a user of the system.
var ErrNoSuchUser = errors.New("proc: no such user")

// ErrNoAccess is wrapped by the errors of [User.CheckDir] and
// [User.CheckExec]: the user cannot reach the directory or run the
// program.
var ErrNoAccess = errors.New("proc: no access")

// errUnsupported is the error of a root process where [User.Start] cannot
// drop the privileges.
var errUnsupported = errors.New("proc: running commands as another user, privileges dropped, is supported on Linux only: run the process as an unprivileged user")

// User is the unprivileged user a root process runs its tools' commands
// as, with every privilege dropped ([User.Start]): neither the process's
// environment nor its memory is readable to them (/proc/<pid>/environ,
// mem and maps are root's, and the commands have no capability left to
// read another user's).
type User struct {
	// Name is the user's name ("nobody").
	Name string
	// UID and GID are the user's ID and primary group; the commands get
	// no supplementary group.
	UID, GID uint32
	// Home is the user's home directory: the commands' HOME.
	Home string
}

// String returns the user's name and ID: "nobody (uid 65534)".
func (u *User) String() string {
	return fmt.Sprintf("%s (uid %d)", u.Name, u.UID)
}

// ToolUser returns the user the commands a process runs for its tools run
// as, named by name (a user name or a numeric user ID, looked up in the
// system's user database). It returns nil, meaning the commands run as the
// process's own user and nothing changes, when the process is not root
// (effective user ID 0: it has no privilege to drop and none to give), or
// when name is empty or names a user of ID 0 (the operator's explicit
// choice: the commands run as root, and can read the process's secrets).
// It fails, wrapping [ErrNoSuchUser], when name is not a user, and for a
// root process outside Linux, where it cannot drop the privileges.
func ToolUser(name string) (*User, error) {
	return toolUser(name, os.Geteuid())
}

func toolUser(name string, euid int) (*User, error) {
	if name == "" || euid != 0 {
		return nil, nil //nolint:nilnil // nil is the answer: no user to switch to
	}
	u, err := user.Lookup(name)
	if err != nil {
		if _, numeric := strconv.ParseUint(name, 10, 32); numeric == nil {
			u, err = user.LookupId(name)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %q: %w", ErrNoSuchUser, name, err)
	}
	uid, err := strconv.ParseUint(u.Uid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("proc: user %q: uid %q: %w", name, u.Uid, err)
	}
	gid, err := strconv.ParseUint(u.Gid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("proc: user %q: gid %q: %w", name, u.Gid, err)
	}
	if uid == 0 {
		return nil, nil //nolint:nilnil // root: the commands run as the process's user
	}
	if !dropSupported {
		return nil, errUnsupported
	}
	home := u.HomeDir
	if home == "" {
		home = "/"
	}
	return &User{Name: u.Username, UID: uint32(uid), GID: uint32(gid), Home: home}, nil
}

// withHome returns env with HOME set to the user's home.
func (u *User) withHome(env []string) []string {
	out := make([]string, 0, len(env)+1)
	for _, kv := range env {
		if len(kv) >= 5 && kv[:5] == "HOME=" {
			continue
		}
		out = append(out, kv)
	}
	return append(out, "HOME="+u.Home)
}
