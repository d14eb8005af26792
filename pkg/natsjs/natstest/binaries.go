package natstest

import (
	"os"
	"os/exec"
	"testing"
)

// NATSCLI returns the path of the nats CLI. Without it the test skips,
// unless OFFLOAD_REQUIRE_NATS_CLI is set (make test and CI set it): then it
// fails.
func NATSCLI(t testing.TB) string {
	t.Helper()
	p, err := exec.LookPath("nats")
	if err != nil {
		if os.Getenv("OFFLOAD_REQUIRE_NATS_CLI") != "" {
			t.Fatal("the nats CLI is not on PATH (make tools installs it into .bin/)")
		}
		t.Skip("the nats CLI is not on PATH; run make test")
	}
	return p
}
