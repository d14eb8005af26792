package deploy

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// goFence matches a Go code block of a Markdown document.
var goFence = regexp.MustCompile("(?s)```go\n(.*?)```")

// snippet is one Go code block of a document.
type snippet struct {
	doc  string // the document, from the repository's root
	line int    // the line of its fence
	code string
}

// goSnippets returns the Go code blocks of README.md and docs/*.md.
func goSnippets(t *testing.T) []snippet {
	t.Helper()
	docs, err := filepath.Glob("../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	var out []snippet
	for _, path := range append([]string{"../README.md"}, docs...) {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range goFence.FindAllSubmatchIndex(data, -1) {
			out = append(out, snippet{doc: strings.TrimPrefix(path, "../"), line: 1 + strings.Count(string(data[:m[0]]), "\n"),
				code: string(data[m[2]:m[3]])})
		}
	}
	return out
}

// TestDocsGoSnippetsCompile (issue 38, finding 5; SPEC §21): every Go
// code block of README.md and docs/ is a whole file (package, imports,
// every name defined) that builds against the repository's packages as
// they are, so that a reader can copy it as it is. Each is built as a
// package of its own in the module (go build -overlay: nothing is written
// in the work tree).
func TestDocsGoSnippetsCompile(t *testing.T) {
	if testing.Short() {
		t.Skip("builds every snippet")
	}
	t.Parallel()
	snippets := goSnippets(t)
	if len(snippets) < 4 {
		t.Fatalf("%d Go snippets found: the search missed the documents", len(snippets))
	}
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	overlay := map[string]string{}
	var pkgs []string
	byFile := map[string]snippet{}
	for i, s := range snippets {
		if !strings.HasPrefix(strings.TrimSpace(s.code), "package ") {
			t.Errorf("%s:%d: a Go snippet that is not a whole file (it starts with no package clause): a reader cannot build it", s.doc, s.line)
			continue
		}
		pkg := fmt.Sprintf("internal/docsnippet%d", i)
		file := filepath.Join(dir, fmt.Sprintf("snippet%d.go", i))
		if err := os.WriteFile(file, []byte(s.code), 0o600); err != nil {
			t.Fatal(err)
		}
		overlay[filepath.Join(root, pkg, "snippet.go")] = file
		pkgs = append(pkgs, "./"+pkg)
		byFile[file] = s
	}
	if len(pkgs) == 0 {
		return
	}
	data, err := json.Marshal(map[string]any{"Replace": overlay})
	if err != nil {
		t.Fatal(err)
	}
	ov := filepath.Join(dir, "overlay.json")
	if err := os.WriteFile(ov, data, 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(t.Context(), "go", append([]string{"build", "-overlay=" + ov}, pkgs...)...)
	cmd.Dir = root
	out, err := cmd.CombinedOutput()
	if err == nil {
		return
	}
	// Name each failing snippet by its document and line.
	msg := string(out)
	for file, s := range byFile {
		msg = strings.ReplaceAll(msg, file, fmt.Sprintf("%s, the snippet of line %d, line ", s.doc, s.line))
	}
	t.Errorf("the documents' Go snippets do not build: %v\n%s", err, msg)
}
