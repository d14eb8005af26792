//go:build linux

package proc

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"syscall"

	"golang.org/x/sys/unix"
)

// Start starts cmd as u with every privilege dropped; a nil u starts it
// as it is (cmd.Start). The command runs as u's user and primary group,
// with no supplementary group, HOME set to u's home, no capability in any
// set (inheritable, permitted, effective, ambient and bounding) and
// no_new_privs set, so that nothing it executes (a set-user-ID program, a
// file with capabilities) gives it a privilege back: it cannot read the
// environment or memory of the process that started it, nor of any
// process not its user's.
//
// Go's exec gives the user and the groups (SysProcAttr.Credential: the
// kernel clears the permitted, effective and ambient sets when a root
// process changes to another user). No_new_privs, the bounding and
// inheritable sets are attributes of a thread, which a child copies from
// the thread that forks it: Start sets them on a thread of its own (never
// the main thread), locked to a goroutine that forks the command and then
// ends without unlocking it, so that the Go runtime ends the thread
// instead of running other goroutines on it. The process's other threads
// keep their privileges.
//
// cmd.SysProcAttr, when set (Setpgid), is kept, with its Credential and
// AmbientCaps replaced; cmd.Env (cmd.Environ() when nil) gets u's HOME.
func (u *User) Start(cmd *exec.Cmd) error {
	if u == nil {
		return cmd.Start()
	}
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Credential = &syscall.Credential{Uid: u.UID, Gid: u.GID, Groups: []uint32{}}
	cmd.SysProcAttr.AmbientCaps = nil
	env := cmd.Env
	if env == nil {
		env = cmd.Environ()
	}
	cmd.Env = u.withHome(env)
	var err error
	onSpareThread(func() bool {
		if err = dropThreadPrivileges(); err == nil {
			err = cmd.Start()
		}
		return false // its privileges dropped for good: discard the thread
	})
	return err
}

// onSpareThread runs f in a goroutine locked to a thread that is not the
// process's main thread, and waits for it. The thread goes back to the
// runtime when f returns true; otherwise the goroutine ends locked to it,
// and the runtime ends the thread with it, whatever f changed of it. The
// main thread is never given to f: the runtime cannot end it and would
// keep it, wedged, for the process's life, and the kernel shows its
// credentials as the process's (/proc/<pid>/status, the checks of
// signals sent to the process).
func onSpareThread(f func() (reuse bool)) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread()
		if unix.Gettid() == unix.Getpid() {
			// The main thread stays locked to this goroutine meanwhile, so
			// the runtime runs the next one on another thread.
			onSpareThread(f)
			runtime.UnlockOSThread()
			return
		}
		if f() {
			runtime.UnlockOSThread()
		}
	}()
	<-done
}

// dropSupported is true: [User.Start] drops the privileges.
const dropSupported = true

// keepCapsBits are the secure bits (linux/securebits.h) that would keep
// capabilities across a change of user: SECBIT_NO_SETUID_FIXUP and
// SECBIT_KEEP_CAPS.
const keepCapsBits = 1<<2 | 1<<4

// dropThreadPrivileges sets, on the calling thread, what a child it forks
// inherits and cannot undo: no_new_privs, empty inheritable, ambient and
// bounding sets, and secure bits that let a change of user clear the
// capabilities. The thread keeps its permitted and effective sets (the
// child needs CAP_SETUID and CAP_SETGID to change its user, which then
// clears them).
func dropThreadPrivileges() error {
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("proc: prctl(PR_SET_NO_NEW_PRIVS): %w", err)
	}
	bits, err := unix.PrctlRetInt(unix.PR_GET_SECUREBITS, 0, 0, 0, 0)
	if err != nil {
		return fmt.Errorf("proc: prctl(PR_GET_SECUREBITS): %w", err)
	}
	if bits&keepCapsBits != 0 {
		if err := unix.Prctl(unix.PR_SET_SECUREBITS, uintptr(bits&^keepCapsBits), 0, 0, 0); err != nil {
			return fmt.Errorf("proc: the secure bits %#x keep capabilities across a change of user and cannot be cleared: %w", bits, err)
		}
	}
	// Not on kernels before 4.3, which have no ambient set.
	if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0); err != nil && !errors.Is(err, unix.EINVAL) {
		return fmt.Errorf("proc: prctl(PR_CAP_AMBIENT_CLEAR_ALL): %w", err)
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var caps [2]unix.CapUserData
	if err := unix.Capget(&hdr, &caps[0]); err != nil {
		return fmt.Errorf("proc: capget: %w", err)
	}
	setpcap := caps[unix.CAP_SETPCAP/32].Effective&(1<<(unix.CAP_SETPCAP%32)) != 0
	caps[0].Inheritable, caps[1].Inheritable = 0, 0
	if err := unix.Capset(&hdr, &caps[0]); err != nil {
		return fmt.Errorf("proc: capset (inheritable set): %w", err)
	}
	// Emptying the bounding set takes CAP_SETPCAP. Without it (a container
	// that dropped it) the set stays, and grants nothing: no_new_privs
	// keeps an exec from adding to the (empty) permitted set.
	if !setpcap {
		return nil
	}
	for c := range 64 {
		if err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0); err != nil {
			if errors.Is(err, unix.EINVAL) {
				break // past the kernel's last capability
			}
			return fmt.Errorf("proc: prctl(PR_CAPBSET_DROP, %d): %w", c, err)
		}
	}
	return nil
}

// onThreadAs runs f on a thread ([onSpareThread]) whose filesystem user
// is uid, filesystem group gid and supplementary groups none, so that the
// kernel's checks of f's system calls on files and on other processes'
// /proc entries (the filesystem credentials decide both) are that user's;
// the thread keeps its user, group and capabilities otherwise, and the
// other threads are not changed. The thread is given its credentials back
// after f and returned to the runtime, or discarded when they cannot be
// restored.
func onThreadAs(uid, gid uint32, f func() error) error {
	var err error
	onSpareThread(func() bool {
		// golang.org/x/sys/unix's calls change the calling thread alone
		// (the syscall package's and libc's would change every thread).
		groups, gerr := unix.Getgroups()
		if gerr != nil {
			err = fmt.Errorf("proc: getgroups: %w", gerr)
			return true
		}
		// Changing the filesystem user clears the filesystem capabilities
		// from the effective set, and changing it back to root sets those
		// of the permitted set: the sets are put back as they were.
		hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
		var caps [2]unix.CapUserData
		if cerr := unix.Capget(&hdr, &caps[0]); cerr != nil {
			err = fmt.Errorf("proc: capget: %w", cerr)
			return true
		}
		fsuid, _ := unix.SetfsuidRetUid(-1) // -1 changes nothing: the current ID
		fsgid, _ := unix.SetfsgidRetGid(-1)
		if err = unix.Setgroups(nil); err != nil {
			err = fmt.Errorf("proc: setgroups: %w", err)
		} else {
			_, _ = unix.SetfsgidRetGid(int(gid))
			_, _ = unix.SetfsuidRetUid(int(uid))
			if got, gotg := fsID(unix.SetfsuidRetUid), fsID(unix.SetfsgidRetGid); got != int(uid) || gotg != int(gid) {
				err = fmt.Errorf("proc: setfsuid(%d), setfsgid(%d): the thread's filesystem IDs are %d, %d", uid, gid, got, gotg)
			} else {
				err = f()
			}
		}
		_, _ = unix.SetfsuidRetUid(fsuid)
		_, _ = unix.SetfsgidRetGid(fsgid)
		restored := unix.Setgroups(groups) == nil && unix.Capset(&hdr, &caps[0]) == nil
		// Back to the runtime only as it was; else discarded.
		return restored && fsID(unix.SetfsuidRetUid) == fsuid && fsID(unix.SetfsgidRetGid) == fsgid
	})
	return err
}

// fsID returns the thread's filesystem user or group ID: set (setfsuid
// or setfsgid) called with -1, which changes nothing.
func fsID(set func(int) (int, error)) int {
	id, _ := set(-1)
	return id
}

// CheckDir checks that u can enter dir (search permission on it and on
// every directory above it), as the commands it runs there must (their
// working directory); with write, that it can also create files in it. A
// nil u checks nothing.
func (u *User) CheckDir(dir string, write bool) error {
	if u == nil {
		return nil
	}
	mode, what := uint32(unix.X_OK), "enter"
	if write {
		mode, what = unix.X_OK|unix.W_OK, "write in"
	}
	return u.check(dir, mode, what)
}

// CheckExec checks that u can run the program at path: execute
// permission on it and search permission on the directories above it, and
// read permission too for a script (#!), which its interpreter reads. A
// nil u checks nothing.
func (u *User) CheckExec(path string) error {
	if u == nil {
		return nil
	}
	mode := uint32(unix.X_OK)
	if f, err := os.Open(path); err == nil {
		head := make([]byte, 2)
		if n, _ := f.Read(head); n == 2 && string(head) == "#!" {
			mode |= unix.R_OK
		}
		_ = f.Close()
	}
	return u.check(path, mode, "run")
}

func (u *User) check(path string, mode uint32, what string) error {
	var denied error
	err := onThreadAs(u.UID, u.GID, func() error {
		// faccessat2 with AT_EACCESS checks with the filesystem
		// credentials; faccessat (access) would check as the real user.
		denied = unix.Faccessat2(unix.AT_FDCWD, path, mode, unix.AT_EACCESS)
		return nil
	})
	if err != nil {
		return fmt.Errorf("proc: checking what %s can do: %w", u, err)
	}
	if errors.Is(denied, unix.ENOSYS) {
		return nil // a kernel before 5.8: the command itself will say
	}
	if denied != nil {
		return fmt.Errorf("%w: the tool user %s cannot %s %s: %w", ErrNoAccess, u, what, path, denied)
	}
	return nil
}
