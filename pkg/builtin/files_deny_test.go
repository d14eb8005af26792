package builtin_test

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/offload-dev/offload/pkg/builtin"
	"github.com/offload-dev/offload/pkg/protocol"
)

// TestFileToolsRefuseTheStore (SPEC §9): the store directory holds the NATS
// credentials; the file tools refuse it wherever the root is, through
// relative, absolute and symbolic-link paths.
func TestFileToolsRefuseTheStore(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	store := filepath.Join(root, ".offload")
	outside := filepath.Join(t.TempDir(), "store2")
	for _, d := range []string{store, outside} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, "nkey.seed"), []byte("SUA-secret"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(".offload", filepath.Join(root, "link")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(root, "out")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "ok.txt"), []byte("fine"), 0o644); err != nil {
		t.Fatal(err)
	}
	tools := toolsFor(t, builtin.Config{Root: root, DenyPaths: []string{store, outside}})

	for _, args := range []string{
		`{"path":".offload/nkey.seed"}`,
		`{"path":"./x/../.offload/nkey.seed"}`,
		`{"path":"` + filepath.Join(store, "nkey.seed") + `"}`,
		`{"path":"link/nkey.seed"}`,
		`{"path":"out/nkey.seed"}`,
	} {
		_, err := call(t.Context(), t, tools["read_file"], args)
		wantFail(t, err, "not allowed")
	}
	for _, args := range []string{`{"path":".offload"}`, `{"path":"link"}`, `{"path":"out"}`} {
		_, err := call(t.Context(), t, tools["list_dir"], args)
		wantFail(t, err, "not allowed")
	}
	for _, args := range []string{`{"path":".offload/new","content":"x"}`, `{"path":"link/sub/new","content":"x"}`, `{"path":".offload/nkey.seed","content":"x"}`} {
		_, err := call(t.Context(), t, tools["write_file"], args)
		wantFail(t, err, "not allowed")
	}
	if b, _ := os.ReadFile(filepath.Join(store, "nkey.seed")); string(b) != "SUA-secret" {
		t.Errorf("seed overwritten: %q", b)
	}
	if _, err := os.Stat(filepath.Join(store, "new")); err == nil {
		t.Error("write_file created a file in the store")
	}
	// Everything else still works.
	if out, err := call(t.Context(), t, tools["read_file"], `{"path":"ok.txt"}`); err != nil || out.(builtin.ReadFileResult).Content != "fine" {
		t.Errorf("read ok.txt: %v %v", out, err)
	}
	if _, err := call(t.Context(), t, tools["list_dir"], `{"path":"."}`); err != nil {
		t.Errorf("list root: %v", err)
	}
}

// TestReadFileResultFitsThePayload (SPEC §9 "Encoded sizes"): a file
// read_file accepts fits a result message once JSON-encoded; one that would
// not is refused with a reason.
func TestReadFileResultFitsThePayload(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	if err := os.WriteFile(filepath.Join(root, "max.txt"), bytes.Repeat([]byte("x"), builtin.MaxFileBytes), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "escaped.txt"), bytes.Repeat([]byte("<"), builtin.MaxFileBytes/2), 0o644); err != nil {
		t.Fatal(err)
	}
	read := toolsFor(t, builtin.Config{Root: root})["read_file"]
	out, err := call(t.Context(), t, read, `{"path":"max.txt"}`)
	if err != nil {
		t.Fatal(err)
	}
	res := protocol.ResultFromOutcome(out, nil)
	res.TaskID, res.ToolCallID, res.Worker = protocol.NewID(), "call_"+strings.Repeat("x", 64), strings.Repeat("w", 80)
	if data, _ := json.Marshal(res); len(data) > protocol.DefaultMaxSize-1024 {
		t.Errorf("a file of MaxFileBytes gives a result of %d bytes", len(data))
	}
	_, err = call(t.Context(), t, read, `{"path":"escaped.txt"}`)
	wantFail(t, err, "as JSON text")
}
