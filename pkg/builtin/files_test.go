package builtin_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/offload-dev/offload/pkg/builtin"
)

// fsBundle is a root directory with a file, a subdirectory, symlinks inside
// and out, and a secret file outside the root.
type fsBundle struct {
	root, outside string
}

func setupFS(t *testing.T) fsBundle {
	t.Helper()
	base := t.TempDir()
	b := fsBundle{root: filepath.Join(base, "root"), outside: filepath.Join(base, "outside")}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(b.root, "sub"), 0o755))
	must(os.MkdirAll(b.outside, 0o755))
	must(os.WriteFile(filepath.Join(b.root, "hello.txt"), []byte("hello\n"), 0o644))
	must(os.WriteFile(filepath.Join(b.root, "sub", "inner.txt"), []byte("inner"), 0o644))
	must(os.WriteFile(filepath.Join(b.outside, "secret.txt"), []byte("secret"), 0o644))
	must(os.Symlink("hello.txt", filepath.Join(b.root, "link.txt")))                           // inside
	must(os.Symlink("../outside/secret.txt", filepath.Join(b.root, "escape.txt")))             // relative escape
	must(os.Symlink(filepath.Join(b.outside, "secret.txt"), filepath.Join(b.root, "abs.txt"))) // absolute escape
	must(os.Symlink("../outside", filepath.Join(b.root, "outdir")))                            // directory escape
	return b
}

func TestReadFile(t *testing.T) {
	t.Parallel()
	b := setupFS(t)
	read := toolsFor(t, builtin.Config{Root: b.root})["read_file"]

	for _, p := range []string{"hello.txt", "./hello.txt", "sub/../hello.txt", "link.txt", filepath.Join(b.root, "hello.txt")} {
		out, err := call(t.Context(), t, read, `{"path":`+quote(p)+`}`)
		if err != nil {
			t.Errorf("%s: %v", p, err)
			continue
		}
		if r := out.(builtin.ReadFileResult); r.Content != "hello\n" || r.Size != 6 {
			t.Errorf("%s: %+v", p, r)
		}
	}
	out, err := call(t.Context(), t, read, `{"path":"sub/inner.txt"}`)
	if err != nil || out.(builtin.ReadFileResult).Path != "sub/inner.txt" {
		t.Errorf("sub/inner.txt: %v %v", out, err)
	}
}

func TestReadFileRefusesEscapes(t *testing.T) {
	t.Parallel()
	b := setupFS(t)
	read := toolsFor(t, builtin.Config{Root: b.root})["read_file"]
	for _, p := range []string{
		"../outside/secret.txt",
		"sub/../../outside/secret.txt",
		"..",
		filepath.Join(b.outside, "secret.txt"),
		"/etc/passwd",
		"escape.txt",
		"abs.txt",
		"outdir/secret.txt",
	} {
		_, err := call(t.Context(), t, read, `{"path":`+quote(p)+`}`)
		wantFail(t, err, "outside the root")
	}
}

func TestReadFileFailures(t *testing.T) {
	t.Parallel()
	b := setupFS(t)
	if err := os.WriteFile(filepath.Join(b.root, "big.txt"), []byte(strings.Repeat("x", builtin.MaxFileBytes+1)), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(b.root, "max.txt"), []byte(strings.Repeat("x", builtin.MaxFileBytes)), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(b.root, "bin"), []byte{0xff, 0xfe, 0x00}, 0o644); err != nil {
		t.Fatal(err)
	}
	read := toolsFor(t, builtin.Config{Root: b.root})["read_file"]
	tests := []struct{ path, want string }{
		{"big.txt", "over the limit"},
		{"bin", "not UTF-8"},
		{"missing.txt", "does not exist"},
		{"sub", "is a directory"},
		{"", "path is empty"},
	}
	for _, tc := range tests {
		_, err := call(t.Context(), t, read, `{"path":`+quote(tc.path)+`}`)
		wantFail(t, err, tc.want)
	}
	if _, err := call(t.Context(), t, read, `{"path":"max.txt"}`); err != nil {
		t.Errorf("file of exactly MaxFileBytes: %v", err)
	}
	if _, err := read.ParseArgs(`{}`); err == nil {
		t.Error("missing path accepted by the schema")
	}
}

func TestListDir(t *testing.T) {
	t.Parallel()
	b := setupFS(t)
	list := toolsFor(t, builtin.Config{Root: b.root})["list_dir"]

	out, err := call(t.Context(), t, list, `{}`)
	if err != nil {
		t.Fatal(err)
	}
	r := out.(builtin.ListDirResult)
	want := []builtin.DirEntry{
		{Name: "abs.txt", Type: "symlink"},
		{Name: "escape.txt", Type: "symlink"},
		{Name: "hello.txt", Type: "file", Size: 6},
		{Name: "link.txt", Type: "symlink"},
		{Name: "outdir", Type: "symlink"},
		{Name: "sub", Type: "dir"},
	}
	if r.Path != "." || len(r.Entries) != len(want) || r.Truncated {
		t.Fatalf("list . = %+v", r)
	}
	for i, w := range want {
		e := r.Entries[i]
		if e.Name != w.Name || e.Type != w.Type || (w.Type == "file" && e.Size != w.Size) {
			t.Errorf("entry %d = %+v, want %+v", i, e, w)
		}
	}

	out, err = call(t.Context(), t, list, `{"path":"sub"}`)
	if err != nil {
		t.Fatal(err)
	}
	if r := out.(builtin.ListDirResult); len(r.Entries) != 1 || r.Entries[0] != (builtin.DirEntry{Name: "inner.txt", Type: "file", Size: 5}) {
		t.Errorf("list sub = %+v", r)
	}

	for _, p := range []string{"..", "outdir", "../outside", b.outside} {
		_, err := call(t.Context(), t, list, `{"path":`+quote(p)+`}`)
		wantFail(t, err, "outside the root")
	}
	_, err = call(t.Context(), t, list, `{"path":"hello.txt"}`)
	wantFail(t, err, "not a directory")
	_, err = call(t.Context(), t, list, `{"path":"nope"}`)
	wantFail(t, err, "does not exist")
}

func TestListDirTruncates(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	for i := range builtin.MaxDirEntries + 5 {
		if err := os.WriteFile(filepath.Join(root, "f"+strconv.Itoa(i)), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	out, err := call(t.Context(), t, toolsFor(t, builtin.Config{Root: root})["list_dir"], `{"path":"."}`)
	if err != nil {
		t.Fatal(err)
	}
	if r := out.(builtin.ListDirResult); !r.Truncated || len(r.Entries) != builtin.MaxDirEntries {
		t.Errorf("truncated = %v, %d entries", r.Truncated, len(r.Entries))
	}
}

func TestWriteFile(t *testing.T) {
	t.Parallel()
	b := setupFS(t)
	write := toolsFor(t, builtin.Config{Root: b.root})["write_file"]

	out, err := call(t.Context(), t, write, `{"path":"new/deep/file.txt","content":"data"}`)
	if err != nil {
		t.Fatal(err)
	}
	if r := out.(builtin.WriteFileResult); r.Path != "new/deep/file.txt" || r.BytesWritten != 4 {
		t.Errorf("result = %+v", r)
	}
	if got, _ := os.ReadFile(filepath.Join(b.root, "new", "deep", "file.txt")); string(got) != "data" {
		t.Errorf("file holds %q", got)
	}
	// Overwrite.
	if _, err := call(t.Context(), t, write, `{"path":"hello.txt","content":"bye"}`); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(filepath.Join(b.root, "hello.txt")); string(got) != "bye" {
		t.Errorf("hello.txt holds %q", got)
	}

	for _, p := range []string{"../outside/x.txt", "outdir/x.txt", "escape.txt", filepath.Join(b.outside, "x.txt"), "outdir/new/x.txt"} {
		_, err := call(t.Context(), t, write, `{"path":`+quote(p)+`,"content":"pwned"}`)
		wantFail(t, err, "outside the root")
	}
	if got, _ := os.ReadFile(filepath.Join(b.outside, "secret.txt")); string(got) != "secret" {
		t.Errorf("secret.txt overwritten: %q", got)
	}
	ents, _ := os.ReadDir(b.outside)
	if len(ents) != 1 {
		t.Errorf("files created outside the root: %v", ents)
	}

	_, err = call(t.Context(), t, write, `{"path":".","content":"x"}`)
	wantFail(t, err, "is a directory")
	_, err = call(t.Context(), t, write, `{"path":"sub","content":"x"}`)
	wantFail(t, err)
	_, err = call(t.Context(), t, write, `{"path":"big","content":`+quote(strings.Repeat("x", builtin.MaxFileBytes+1))+`}`)
	wantFail(t, err, "over the limit")
}

// quote returns s as a JSON string.
func quote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}
