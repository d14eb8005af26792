package nodetest_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/offload-dev/offload/internal/nodetest"
	"github.com/offload-dev/offload/internal/offloadtest"
)

func TestMain(m *testing.M) { offloadtest.WrapTestMain(m) }

// A peer not installed skips the test that needs it (not in CI, not
// required); the path of an installed one is its file in node_modules.
func TestNode(t *testing.T) {
	t.Setenv("CI", "")
	p := nodetest.Peer{Dir: t.TempDir(), Package: "@scope/none", Require: "OFFLOAD_REQUIRE_NODETEST_NONE"}
	if got, want := p.Path(), filepath.Join(p.Dir, "node_modules", "@scope", "none", "package.json"); got != want {
		t.Errorf("Path: %s, want %s", got, want)
	}
	ran := false
	t.Run("missing", func(t *testing.T) {
		nodetest.Node(t, p)
		ran = true
	})
	if ran {
		t.Error("a missing peer did not stop the test")
	}
	// An installed one (the A2A kit's, when npm ci ran there) gives node.
	a2a := nodetest.Peer{Dir: filepath.Join("..", "a2atest", "node"), Package: "@a2a-js/sdk"}
	if _, err := os.Stat(a2a.Path()); err != nil {
		return
	}
	if _, err := exec.LookPath("node"); err != nil {
		return
	}
	if node := nodetest.Node(t, a2a); node == "" {
		t.Error("an installed peer: no node")
	}
}
