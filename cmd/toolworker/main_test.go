package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestUsageErrors(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	clash := filepath.Join(dir, "clash.yaml")
	writeFile(t, clash, "tools:\n  - name: sleep\n    description: x\n    command: [\"true\"]\n", 0o644)
	bad := filepath.Join(dir, "bad.yaml")
	writeFile(t, bad, "tools:\n  - name: ok\n    bogus_key: 1\n    command: [\"true\"]\n", 0o644)
	getenv := func(string) string { return "" }
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "nothing to serve"},
		{[]string{"--tools", "nope"}, `unknown tool "nope"`},
		{[]string{"--config", clash}, "has the name of a built-in tool"},
		{[]string{"--config", bad}, "bogus_key"},
		{[]string{"--config", filepath.Join(dir, "missing.yaml")}, "missing.yaml"},
		{[]string{"--tools", "all", "--concurrency", "0"}, "--concurrency must be at least 1"},
		{[]string{"--tools", "all", "--prefix", "a.b"}, "prefix"},
		{[]string{"--tools", "all", "--id", "has.dot"}, "--id"},
		{[]string{"--tools", "all", "extra"}, "unexpected arguments"},
		{[]string{"--no-such-flag"}, "flag provided but not defined"},
	} {
		var stderr bytes.Buffer
		if code := run(tc.args, getenv, &stderr, nil); code != exitUsage {
			t.Errorf("%v: exit %d, want %d", tc.args, code, exitUsage)
		}
		if !strings.Contains(stderr.String(), tc.want) {
			t.Errorf("%v: stderr %q lacks %q", tc.args, stderr.String(), tc.want)
		}
	}
}

func TestNATSURLFromEnvironment(t *testing.T) {
	t.Parallel()
	o, err := parseFlags([]string{"--tools", "all"}, func(k string) string {
		if k == "NATS_URL" {
			return "nats://example.invalid:4222"
		}
		return ""
	}, os.Stderr)
	if err != nil || o.natsURL != "nats://example.invalid:4222" || o.concurrency != 4 || o.prefix != "tools" {
		t.Fatalf("options %+v, err %v", o, err)
	}
}
