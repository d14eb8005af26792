package proc_test

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/offload-dev/offload/internal/offloadtest"
	"github.com/offload-dev/offload/internal/proc"
)

// nobody is the default tool user, looked up.
func nobody(t *testing.T) *user.User {
	t.Helper()
	u, err := user.Lookup(proc.DefaultToolUser)
	if err != nil {
		t.Fatalf("the default tool user: %v", err)
	}
	return u
}

// TestToolUser: a process that is not root, an empty name and a user of
// ID 0 give no user (nothing changes); a name or a numeric ID of another
// user gives it; an unknown one fails with ErrNoSuchUser.
func TestToolUser(t *testing.T) {
	t.Parallel()
	nb := nobody(t)
	for _, tc := range []struct {
		name string
		euid int
	}{{"nobody", 1000}, {"", 0}, {"root", 0}, {"0", 0}, {"no-such-user-37", 1000}} {
		if u, err := proc.ToolUserFor(tc.name, tc.euid); u != nil || err != nil {
			t.Errorf("%q as uid %d: %v, %v; want none", tc.name, tc.euid, u, err)
		}
	}
	for _, name := range []string{"nobody", nb.Uid} {
		u, err := proc.ToolUserFor(name, 0)
		if err != nil {
			t.Fatal(err)
		}
		if strconv.Itoa(int(u.UID)) != nb.Uid || strconv.Itoa(int(u.GID)) != nb.Gid || u.Name != "nobody" || u.Home != nb.HomeDir {
			t.Errorf("%q: %+v, want %+v", name, u, nb)
		}
	}
	if _, err := proc.ToolUserFor("no-such-user-37", 0); !errors.Is(err, proc.ErrNoSuchUser) || !strings.Contains(err.Error(), "no-such-user-37") {
		t.Errorf("an unknown user: %v", err)
	}
}

// toolUser returns the default tool user of a root process.
func toolUser(t *testing.T) *proc.User {
	t.Helper()
	offloadtest.RequireRoot(t)
	u, err := proc.ToolUser(proc.DefaultToolUser)
	if err != nil || u == nil {
		t.Fatalf("tool user: %v, %v", u, err)
	}
	return u
}

// status returns the lines of /proc/self/status a command prints, and its
// ids, by key ("Uid", "CapEff", "NoNewPrivs", "groups", "home", ...).
const statusScript = `grep -E '^(Uid|Gid|Groups|Cap(Inh|Prm|Eff|Bnd|Amb)|NoNewPrivs):' /proc/self/status; echo "home: $HOME"`

func parseStatus(out string) map[string]string {
	got := map[string]string{}
	for line := range strings.SplitSeq(out, "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok {
			got[k] = strings.Join(strings.Fields(v), " ")
		}
	}
	return got
}

// TestUserStartDropsEverything (issue 37): a command started as the tool
// user by a root process has the user's IDs, no supplementary group, no
// capability in any set, no_new_privs and the user's HOME, and keeps the
// SysProcAttr it was given (its process group).
func TestUserStartDropsEverything(t *testing.T) {
	u := toolUser(t)
	t.Parallel()
	cmd := exec.Command("/bin/sh", "-c", statusScript+`; echo "pgid: $(ps -o pgid= -p $$)"; echo "pid: $$"`)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=/root"}
	var out, errb bytes.Buffer
	if err := (proc.Runner{User: u}).Run(cmd, &out, &errb, time.Second); err != nil {
		t.Fatalf("run: %v (stderr %q)", err, errb.String())
	}
	got := parseStatus(out.String())
	id := func(n uint32) string { s := strconv.Itoa(int(n)); return s + " " + s + " " + s + " " + s }
	want := map[string]string{
		"Uid": id(u.UID), "Gid": id(u.GID), "Groups": "",
		"CapInh": "0000000000000000", "CapPrm": "0000000000000000", "CapEff": "0000000000000000",
		"CapBnd": "0000000000000000", "CapAmb": "0000000000000000", "NoNewPrivs": "1",
		"home": u.Home, "pgid": got["pid"],
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: %q, want %q", k, got[k], v)
		}
	}
	if t.Failed() {
		t.Logf("output:\n%s", out.String())
	}
}

// TestUserStartLeavesTheProcess: the threads that started commands as the
// tool user are never reused: commands started afterwards, at the same
// time, without a user, keep root's capabilities and no_new_privs unset,
// and so does the process.
func TestUserStartLeavesTheProcess(t *testing.T) {
	u := toolUser(t)
	t.Parallel()
	const n = 16
	var wg sync.WaitGroup
	outs := make([]bytes.Buffer, 2*n)
	errs := make([]error, 2*n)
	for i := range 2 * n {
		wg.Go(func() {
			cmd := exec.Command("/bin/sh", "-c", statusScript)
			var ru proc.Runner
			if i%2 == 0 {
				ru.User = u
			}
			errs[i] = ru.Run(cmd, &outs[i], &bytes.Buffer{}, time.Second)
		})
	}
	wg.Wait()
	self, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	mine := parseStatus(string(self))
	for i := range 2 * n {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		got := parseStatus(outs[i].String())
		if i%2 == 0 {
			if got["NoNewPrivs"] != "1" || got["CapEff"] != "0000000000000000" {
				t.Errorf("command %d, as the tool user: %v", i, got)
			}
			continue
		}
		if got["NoNewPrivs"] != "0" || got["CapEff"] != mine["CapEff"] || got["CapBnd"] != mine["CapBnd"] || !strings.HasPrefix(got["Uid"], "0 ") {
			t.Errorf("command %d, as the process's user, lost privileges: %v (the process: %v)", i, got, mine)
		}
	}
	if mine["NoNewPrivs"] != "0" {
		t.Errorf("the process has no_new_privs: %v", mine)
	}
}

// TestUserChecks: CheckDir and CheckExec answer as the tool user would
// find (search, write, execute and, for a script, read permission), and
// leave the process's own access as it was.
func TestUserChecks(t *testing.T) {
	u := toolUser(t)
	t.Parallel()
	base := t.TempDir()
	if err := os.Chmod(base, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Dir(base), 0o711); err != nil {
		t.Fatal(err)
	}
	mk := func(name string, mode os.FileMode) string {
		p := filepath.Join(base, name)
		if err := os.Mkdir(p, mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil { // past the umask
			t.Fatal(err)
		}
		return p
	}
	closed, readOnly, open := mk("closed", 0o700), mk("ro", 0o755), mk("open", 0o777)
	inside := filepath.Join(closed, "sub")
	if err := os.Mkdir(inside, 0o777); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		dir   string
		write bool
		ok    bool
	}{{closed, false, false}, {inside, false, false}, {readOnly, false, true}, {readOnly, true, false}, {open, true, true}} {
		err := u.CheckDir(tc.dir, tc.write)
		if (err == nil) != tc.ok || (err != nil && !errors.Is(err, proc.ErrNoAccess)) {
			t.Errorf("CheckDir(%s, write %v): %v, want ok %v", tc.dir, tc.write, err, tc.ok)
		}
	}
	file := func(name, content string, mode os.FileMode) string {
		p := filepath.Join(open, name)
		if err := os.WriteFile(p, []byte(content), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, tc := range []struct {
		path string
		ok   bool
	}{
		{file("script-ok", "#!/bin/sh\n", 0o755), true},
		{file("script-x-only", "#!/bin/sh\n", 0o711), false}, // the interpreter cannot read it
		{file("root-only", "#!/bin/sh\n", 0o700), false},
		{file("binary-x-only", "\x7fELF", 0o711), true},
		{filepath.Join(inside, "x"), false},
	} {
		err := u.CheckExec(tc.path)
		if (err == nil) != tc.ok {
			t.Errorf("CheckExec(%s): %v, want ok %v", tc.path, err, tc.ok)
		}
	}
	// The process's threads are root's again: root's files stay readable.
	secret := filepath.Join(closed, "secret")
	if err := os.WriteFile(secret, []byte("s"), 0o600); err != nil {
		t.Fatal(err)
	}
	for range 64 {
		if _, err := os.ReadFile(secret); err != nil {
			t.Fatalf("after the checks, the process cannot read its own file: %v", err)
		}
	}
}

// TestReadAsOwner: the reaper reads the environment of a command of the
// tool user as its owner, which needs no CAP_SYS_PTRACE (root in most
// containers has none), and finds its scope.
func TestReadAsOwner(t *testing.T) {
	u := toolUser(t)
	t.Parallel()
	cmd := exec.Command("/bin/sleep", "600")
	cmd.Env = []string{proc.ScopeEnv + "=scope-37"}
	if err := u.Start(cmd); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	pid := cmd.Process.Pid
	b, err := proc.ReadAsOwner(pid, "/proc/"+strconv.Itoa(pid)+"/environ")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(b, []byte(proc.ScopeEnv+"=scope-37")) {
		t.Errorf("environ %q", b)
	}
	if s, ok := proc.ScopeEnvOf(pid); !ok || s != "scope-37" {
		t.Errorf("scope %q, %v", s, ok)
	}
}
