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
