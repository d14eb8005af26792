package proctest

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
)

// Binaries builds a test package's binaries once for all its tests. A
// package declares one (var bins proctest.Binaries); the first call of Dir
// builds, the others reuse the result.
type Binaries struct {
	once sync.Once
	dir  string
	err  error
}

// Dir builds the main packages pkgs (as `go build` takes them) into a
// temporary directory on its first call and returns the directory. It skips
// the test under -short (end-to-end tests build binaries) and fails it when
// the build failed.
func (b *Binaries) Dir(t testing.TB, pkgs ...string) string {
	t.Helper()
	if testing.Short() {
		t.Skip("end-to-end test: builds binaries")
	}
	b.once.Do(func() {
		if b.dir, b.err = os.MkdirTemp("", "offload-e2e"); b.err != nil { //nolint:usetesting // built once for every test of the process: t.TempDir would go with the first test
			return
		}
		cmd := exec.Command("go", append([]string{"build", "-o", b.dir + string(os.PathSeparator)}, pkgs...)...)
		if out, err := cmd.CombinedOutput(); err != nil {
			b.err = fmt.Errorf("go build %s: %w\n%s", strings.Join(pkgs, " "), err, out)
		}
	})
	if b.err != nil {
		t.Fatal(b.err)
	}
	return b.dir
}
