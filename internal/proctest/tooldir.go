package proctest

import (
	"os"
	"path/filepath"
	"testing"
)

// ToolDir returns a directory that a worker's tool user (nobody, when
// the tests run as root: SPEC §9) can enter and write, removed when the
// test ends: t.TempDir's parents are 0700, so a command or a file tool's
// --root there would be refused at the worker's start.
func ToolDir(t testing.TB) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.Chmod(filepath.Dir(dir), 0o711); err != nil { //nolint:gosec // G302: the tool user must enter it, as the test says
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o777); err != nil { //nolint:gosec // G302: the tool user must write in it, as the test says
		t.Fatal(err)
	}
	return dir
}

// ToolUserDirs returns two directories below one the tool user can reach
// (its parents traversable), removed when the test ends: open (0755),
// which the tool user may enter, and closed (0700), which it may not, for
// the tests of the checks a tool user meets at a tool's start.
func ToolUserDirs(t testing.TB) (open, closed string) {
	t.Helper()
	base := t.TempDir()
	if err := os.Chmod(filepath.Dir(base), 0o711); err != nil { //nolint:gosec // G302: the tool user must traverse it, as the test says
		t.Fatal(err)
	}
	open, closed = filepath.Join(base, "open"), filepath.Join(base, "closed")
	for d, mode := range map[string]os.FileMode{open: 0o755, closed: 0o700} {
		if err := os.Mkdir(d, mode); err != nil {
			t.Fatal(err)
		}
	}
	return open, closed
}
