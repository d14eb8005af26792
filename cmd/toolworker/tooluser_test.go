package main

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/offload-dev/offload/internal/offloadtest"
	"github.com/offload-dev/offload/internal/proctest"
)

// TestToolUserAtStart (issue 37): a root worker whose tool user does not
// exist, or cannot enter the directory its commands run in (a --config
// tool's, shell's --root), fails at start with a usage error naming the
// user, the directory and what to do; --tool-user root keeps the commands
// root's, and a directory the tool user cannot enter does not stop tools
// that do not run there.
func TestToolUserAtStart(t *testing.T) {
	offloadtest.RequireRoot(t)
	t.Parallel()
	closed := filepath.Join(t.TempDir(), "closed")
	if err := os.Mkdir(closed, 0o700); err != nil { // root's alone: nobody cannot enter it
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(closed, "tools.yaml"), "tools:\n  - name: ok\n    description: x\n    command: [\"true\"]\n", 0o644)
	open := proctest.ToolDir(t)
	writeFile(t, filepath.Join(open, "tools.yaml"), "tools:\n  - name: ok\n    description: x\n    command: [\"./run.sh\"]\n", 0o644)
	writeFile(t, filepath.Join(open, "run.sh"), "#!/bin/sh\ntrue\n", 0o700) // root's alone: nobody cannot run it
	getenv := func(string) string { return "" }
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"--config", filepath.Join(closed, "tools.yaml"), "--tool-user", "no-such-user-37"},
			[]string{"--tool-user", "no such user", "no-such-user-37"}},
		{[]string{"--config", filepath.Join(closed, "tools.yaml")},
			[]string{"nobody (uid 65534) cannot enter " + closed, "--tool-user"}},
		{[]string{"--tools", "shell", "--root", closed},
			[]string{"shell", "nobody (uid 65534) cannot enter " + closed}},
		{[]string{"--config", filepath.Join(open, "tools.yaml")},
			[]string{"nobody (uid 65534) cannot run " + filepath.Join(open, "run.sh")}},
	} {
		var stderr bytes.Buffer
		if code := run(tc.args, getenv, &stderr, nil, nil); code != exitUsage {
			t.Errorf("%v: exit %d, want %d (stderr %q)", tc.args, code, exitUsage, stderr.String())
		}
		for _, w := range tc.want {
			if !strings.Contains(stderr.String(), w) {
				t.Errorf("%v: stderr %q lacks %q", tc.args, stderr.String(), w)
			}
		}
	}

	for _, args := range [][]string{
		{"--config", filepath.Join(closed, "tools.yaml"), "--tool-user", "root"},
		{"--tools", "shell", "--root", closed, "--tool-user", "root"},
		{"--tools", "read_file,sleep", "--root", closed},
		{"--tools", "shell", "--root", open, "--tool-user", "65534"},
	} {
		o, err := parseFlags(args, getenv, os.Stderr)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := selectTools(o, slog.New(slog.DiscardHandler)); err != nil {
			t.Errorf("%v: %v", args, err)
		}
	}
}
