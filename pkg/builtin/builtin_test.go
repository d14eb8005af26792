package builtin_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/offload-dev/offload/pkg/builtin"
	"github.com/offload-dev/offload/pkg/tool"
)

// toolsFor builds the built-in tools with cfg and returns them by name.
func toolsFor(t *testing.T, cfg builtin.Config) map[string]*tool.Tool {
	t.Helper()
	ts, err := builtin.Tools(cfg)
	if err != nil {
		t.Fatalf("Tools: %v", err)
	}
	m := map[string]*tool.Tool{}
	for _, tl := range ts {
		m[tl.Name] = tl
	}
	return m
}

// call validates args against the tool's schema, as the agent and workers
// do, and runs the tool.
func call(ctx context.Context, t *testing.T, tl *tool.Tool, args string) (any, error) {
	t.Helper()
	raw, err := tl.ParseArgs(args)
	if err != nil {
		return nil, err
	}
	return tl.Run(ctx, &tool.RunContext{ToolName: tl.Name}, raw)
}

// wantFail checks that err is a *tool.ToolFailed whose message contains all
// of want.
func wantFail(t *testing.T, err error, want ...string) {
	t.Helper()
	var tf *tool.ToolFailed
	if !errors.As(err, &tf) {
		t.Fatalf("err = %v (%T), want *tool.ToolFailed", err, err)
	}
	for _, w := range want {
		if !strings.Contains(tf.Message, w) {
			t.Errorf("failure %q misses %q", tf.Message, w)
		}
	}
}

func TestNamesMatchTools(t *testing.T) {
	t.Parallel()
	ts, err := builtin.Tools(builtin.Config{Root: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	approval, idempotent := map[string]bool{}, map[string]bool{}
	// SPEC §20: each advertises the timeout that bounds its background
	// calls: its own limit.
	timeouts := map[string]time.Duration{"http_fetch": builtin.DefaultHTTPTimeout, "read_file": builtin.FileTimeout, "list_dir": builtin.FileTimeout,
		"write_file": builtin.FileTimeout, "shell": builtin.DefaultShellMaxTimeout, "sleep": builtin.SleepTimeout}
	for _, tl := range ts {
		if tl.Timeout != timeouts[tl.Name] {
			t.Errorf("%s: Timeout = %v, want %v", tl.Name, tl.Timeout, timeouts[tl.Name])
		}
		names = append(names, tl.Name)
		approval[tl.Name] = tl.RequiresApproval
		idempotent[tl.Name] = tl.Idempotent
		if err := tool.ValidateName(tl.Name); err != nil {
			t.Error(err)
		}
	}
	want := []string{"http_fetch", "read_file", "list_dir", "write_file", "shell", "sleep"}
	if !slices.Equal(names, want) || !slices.Equal(builtin.Names(), want) {
		t.Errorf("tools %v, Names %v, want %v", names, builtin.Names(), want)
	}
	for name, needs := range approval {
		if needs != (name == "write_file" || name == "shell") {
			t.Errorf("%s: RequiresApproval = %v", name, needs)
		}
	}
	// SPEC §13: only the tools without a side effect run again after their
	// worker stopped while running them; the others go to a person.
	for name, is := range idempotent {
		if is != (name == "read_file" || name == "list_dir" || name == "sleep") {
			t.Errorf("%s: Idempotent = %v", name, is)
		}
	}
}

func TestToolsBadRoot(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	file := filepath.Join(dir, "f")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, root := range []string{filepath.Join(dir, "missing"), file} {
		if _, err := builtin.Tools(builtin.Config{Root: root}); err == nil {
			t.Errorf("root %s accepted", root)
		}
	}
}

func Example() {
	root, _ := os.MkdirTemp("", "builtin")
	defer os.RemoveAll(root)
	_ = os.WriteFile(filepath.Join(root, "notes.txt"), []byte("buy milk\n"), 0o644)

	tools, err := builtin.Tools(builtin.Config{Root: root})
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, t := range tools {
		if t.Name != builtin.NameReadFile {
			continue
		}
		out, err := t.Run(context.Background(), &tool.RunContext{}, json.RawMessage(`{"path":"notes.txt"}`))
		fmt.Printf("%q %v\n", out.(builtin.ReadFileResult).Content, err)
		_, err = t.Run(context.Background(), &tool.RunContext{}, json.RawMessage(`{"path":"../etc/passwd"}`))
		fmt.Println(err)
	}
	// Output:
	// "buy milk\n" <nil>
	// read_file: ../etc/passwd is outside the root directory
}
