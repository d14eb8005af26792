package embedded_test

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// natsCLI returns the nats CLI's path; it skips the test when the CLI is not
// on PATH, unless OFFLOAD_REQUIRE_NATS_CLI is set (make test sets it).
func natsCLI(t *testing.T) string {
	t.Helper()
	cli, err := exec.LookPath("nats")
	if err != nil {
		if os.Getenv("OFFLOAD_REQUIRE_NATS_CLI") != "" {
			t.Fatal("nats CLI not on PATH (make tools)")
		}
		t.Skip("nats CLI not on PATH")
	}
	return cli
}

// TestCLIOptionsWithTheNATSCLI runs the real nats CLI with the options the
// binaries print: they reach the embedded server; without them it is
// refused.
func TestCLIOptionsWithTheNATSCLI(t *testing.T) {
	t.Parallel()
	cli := natsCLI(t)
	s := start(t, t.TempDir())
	run := func(args ...string) (string, error) {
		cmd := exec.Command(cli, args...)
		cmd.Env = append(os.Environ(), "XDG_CONFIG_HOME="+t.TempDir(), "NATS_CONTEXT=", "NATS_URL=", "NATS_NKEY=", "NATS_CREDS=")
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	if out, err := run(append(s.CLIOptions(), "account", "info")...); err != nil || !strings.Contains(out, "JetStream") {
		t.Fatalf("nats %v account info: %v\n%s", s.CLIOptions(), err, out)
	}
	if out, err := run(append(s.CLIOptions(), "pub", "hello", "world")...); err != nil {
		t.Fatalf("pub: %v\n%s", err, out)
	}
	out, err := run("--server", s.URL(), "--no-context", "pub", "hello", "world")
	if err == nil || !strings.Contains(strings.ToLower(out), "authorization") {
		t.Errorf("pub without credentials: err %v\n%s", err, out)
	}
}
