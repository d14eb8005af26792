package main

import (
	"strings"
	"testing"

	"github.com/offload-dev/offload/pkg/natsjs/natstest"
)

// TestReplicasFlag: --replicas (env OFFLOAD_REPLICAS) on run and provision;
// a bad value is a usage error, and a stream with another factor is
// reported with the factors and how to change it (SPEC §5.6).
func TestReplicasFlag(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	exec := func(replicasEnv string, args ...string) (int, string) {
		var stderr strings.Builder
		e := env{getenv: func(k string) string {
			if k == "OFFLOAD_REPLICAS" {
				return replicasEnv
			}
			return ""
		}, stdin: strings.NewReader(""), stdout: &strings.Builder{}, stderr: &stderr}
		return execute(t.Context(), args, e), stderr.String()
	}
	for _, tc := range []struct {
		env  string
		args []string
		want string
	}{
		{"", []string{"provision", "--nats", srv.URL(), "--replicas", "-1"}, "--replicas must not be negative"},
		{"x", []string{"provision", "--nats", srv.URL()}, `OFFLOAD_REPLICAS="x"`},
		{"", []string{"run", "--nats", srv.URL(), "--model", "test", "--replicas", "-1", "hi"}, "--replicas must not be negative"},
		{"-3", []string{"run", "--nats", srv.URL(), "--model", "test", "hi"}, `OFFLOAD_REPLICAS="-3"`},
	} {
		if code, stderr := exec(tc.env, tc.args...); code != exitUsage || !strings.Contains(stderr, tc.want) {
			t.Errorf("env %q %v: exit %d, stderr %q; want %d and %q", tc.env, tc.args, code, stderr, exitUsage, tc.want)
		}
	}
	if code, stderr := exec("", "provision", "--nats", srv.URL(), "--replicas", "1"); code != exitOK {
		t.Fatalf("provision --replicas 1: exit %d\n%s", code, stderr)
	}
	// The streams are R1: asking for 3 names the factors and the fix; the
	// same request from the environment too.
	for _, tc := range []struct {
		env  string
		args []string
	}{
		{"", []string{"provision", "--nats", srv.URL(), "--replicas", "3"}},
		{"3", []string{"provision", "--nats", srv.URL()}},
	} {
		code, stderr := exec(tc.env, tc.args...)
		if code != exitFailed || !strings.Contains(stderr, "num_replicas: want 3, have 1") || !strings.Contains(stderr, "nats stream edit") {
			t.Errorf("env %q %v: exit %d, want %d naming the factors and the fix:\n%s", tc.env, tc.args, code, exitFailed, stderr)
		}
	}
	if code, stderr := exec("", "provision", "--nats", srv.URL()); code != exitOK {
		t.Errorf("provision without --replicas uses the streams as they are: exit %d\n%s", code, stderr)
	}
}
