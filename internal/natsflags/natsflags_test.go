package natsflags

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

// The servers: --nats or NATS_URL when given, else the context's URL,
// else the binary's default; OFFLOAD_REPLICAS must be a count.
func TestServersAndOptions(t *testing.T) {
	t.Parallel()
	ctxFile := filepath.Join(t.TempDir(), "ops.json")
	if err := os.WriteFile(ctxFile, []byte(`{"url":"nats://10.1.2.3:4222"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	parse := func(env map[string]string, args ...string) (*Flags, error) {
		getenv := func(k string) string { return env[k] }
		var f Flags
		fl := pflag.NewFlagSet("t", pflag.ContinueOnError)
		f.Register(fl, getenv, "nats://127.0.0.1:4222", "")
		if err := fl.Parse(args); err != nil {
			return nil, err
		}
		opts, err := f.Options(getenv)
		if err == nil {
			f.URL = f.Servers(opts)
		}
		return &f, err
	}
	for _, tc := range []struct {
		env  map[string]string
		args []string
		want string
	}{
		{nil, nil, "nats://127.0.0.1:4222"},
		{nil, []string{"--context", ctxFile}, "nats://10.1.2.3:4222"},
		{nil, []string{"--context", ctxFile, "--nats", "nats://h:1"}, "nats://h:1"},
		{map[string]string{"NATS_URL": "nats://e:2"}, []string{"--context", ctxFile, "--nats", "nats://e:2"}, "nats://e:2"},
	} {
		f, err := parse(tc.env, tc.args...)
		if err != nil || f.URL != tc.want {
			t.Errorf("%v %v: servers %v (%v), want %s", tc.env, tc.args, f, err, tc.want)
		}
	}
	if f, err := parse(map[string]string{ReplicasEnv: "3"}); err != nil || f.Replicas != 3 {
		t.Errorf("OFFLOAD_REPLICAS=3: %v %v", f, err)
	}
	if _, err := parse(map[string]string{ReplicasEnv: "three"}); err == nil || !strings.Contains(err.Error(), `OFFLOAD_REPLICAS="three"`) {
		t.Errorf("OFFLOAD_REPLICAS=three: %v", err)
	}
	if _, err := parse(nil, "--replicas", "-1"); err == nil || !strings.Contains(err.Error(), "--replicas must not be negative") {
		t.Errorf("--replicas -1: %v", err)
	}
}
