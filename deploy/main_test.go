package deploy

import (
	"os"
	"testing"

	"github.com/offload-dev/offload/internal/offloadtest"
)

// TestMain gives the roles of auth.conf their passwords through the
// environment, as an operator does, then runs the tests with goleak.
func TestMain(m *testing.M) {
	for _, r := range roles {
		_ = os.Setenv(passwordEnv(r), password(r))
	}
	offloadtest.WrapTestMain(m)
}
