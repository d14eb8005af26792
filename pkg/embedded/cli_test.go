package embedded_test

import (
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/offload-dev/offload/pkg/natsjs/natstest"
)

// TestCLIOptionsWithTheNATSCLI runs the real nats CLI with the options the
// binaries print: they reach the embedded server; without them it is
// refused.
func TestCLIOptionsWithTheNATSCLI(t *testing.T) {
	t.Parallel()
	cli := natstest.NATSCLI(t)
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
