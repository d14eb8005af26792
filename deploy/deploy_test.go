// Package deploy holds deployment files; its test checks that they stay
// valid.
package deploy

import (
	"os"
	"strings"
	"testing"

	"github.com/nats-io/nats-server/v2/server"
)

func TestNATSConfigParses(t *testing.T) {
	t.Parallel()
	opts, err := server.ProcessConfigFile("nats/nats-server.conf")
	if err != nil {
		t.Fatal(err)
	}
	if !opts.JetStream || opts.MaxPayload != 1<<20 || opts.Port != 4222 || opts.Host != "127.0.0.1" {
		t.Fatalf("jetstream %v max_payload %d host %s port %d", opts.JetStream, opts.MaxPayload, opts.Host, opts.Port)
	}
	if len(opts.Users) != len(roles) || opts.NoAuthUser != "" {
		t.Fatalf("%d users (no-auth user %q), want the %d roles", len(opts.Users), opts.NoAuthUser, len(roles))
	}
	for i, u := range opts.Users {
		if u.Username != roles[i] || u.Password != password(roles[i]) {
			t.Errorf("user %d: %s with password %q, want %s from $%s", i, u.Username, u.Password, roles[i], passwordEnv(roles[i]))
		}
	}
}

// TestAuthNeedsPasswords: without a role's password in the environment the
// configuration does not load (no user with an empty password). Not
// parallel: it changes the environment.
func TestAuthNeedsPasswords(t *testing.T) {
	for _, role := range roles {
		env := passwordEnv(role)
		os.Unsetenv(env)
		_, err := server.ProcessConfigFile("nats/nats-server.conf")
		os.Setenv(env, password(role)) //nolint:usetesting // puts back what os.Unsetenv took, which t.Setenv cannot do; the test is not parallel
		if err == nil || !strings.Contains(err.Error(), env) {
			t.Errorf("without $%s: err %v", env, err)
		}
	}
}
