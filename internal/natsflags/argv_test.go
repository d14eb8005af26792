package natsflags

import (
	"testing"

	"github.com/spf13/pflag"
)

// TestArgvSecretWarning (issue 30, finding 7): a password or token in
// --nats is warned about (every local user reads argv); the same URL in
// NATS_URL, or a URL without one, is not.
func TestArgvSecretWarning(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		env  string
		args []string
		warn bool
	}{
		{"", []string{"--nats", "nats://worker:s3cret@127.0.0.1:4222"}, true},
		{"", []string{"--nats", "nats://127.0.0.1:4222,nats://tok3n@10.0.0.2:4222"}, true},
		{"", []string{"--nats", "nats://127.0.0.1:4222", "--creds", "w.creds"}, false},
		{"nats://worker:s3cret@127.0.0.1:4222", nil, false},
	} {
		getenv := func(k string) string {
			if k == "NATS_URL" {
				return tc.env
			}
			return ""
		}
		var f Flags
		fl := pflag.NewFlagSet("t", pflag.ContinueOnError)
		f.Register(fl, getenv, getenv("NATS_URL"), "")
		if err := fl.Parse(tc.args); err != nil {
			t.Fatal(err)
		}
		if got := f.ArgvSecretWarning(); (got != "") != tc.warn {
			t.Errorf("env %q args %q: warning %q, want one: %v", tc.env, tc.args, got, tc.warn)
		}
	}
}
