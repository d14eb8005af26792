package offloadtest

import (
	"os"
	"testing"
)

// RequireRootEnv names the environment variable that makes [RequireRoot]
// fail a test rather than skip it (CI sets it: it runs as root).
const RequireRootEnv = "OFFLOAD_REQUIRE_ROOT"

// RequireRoot skips the test, saying why, unless the process runs as root
// (effective user ID 0); with OFFLOAD_REQUIRE_ROOT set, it fails it
// instead, so that a test of what a root process does never skips silently
// where root is expected.
func RequireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() == 0 {
		return
	}
	if os.Getenv(RequireRootEnv) != "" {
		t.Fatalf("the test needs root (%s is set) and runs as uid %d", RequireRootEnv, os.Geteuid())
	}
	t.Skipf("the test needs root (it checks what a root process's children can do); runs as uid %d (set %s=1 to fail instead)", os.Geteuid(), RequireRootEnv)
}
