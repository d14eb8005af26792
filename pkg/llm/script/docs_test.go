package script_test

import (
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/offload-dev/offload/pkg/llm/script"
)

// TestDocsExamplesParse: every YAML and JSON example of docs/SCRIPT.md is a
// valid script.
func TestDocsExamplesParse(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile(filepath.Join("..", "..", "..", "docs", "SCRIPT.md"))
	if err != nil {
		t.Fatal(err)
	}
	blocks := regexp.MustCompile("(?s)```(yaml|json)\n(.*?)```").FindAllSubmatch(doc, -1)
	if len(blocks) < 10 {
		t.Fatalf("%d examples in docs/SCRIPT.md", len(blocks))
	}
	for _, b := range blocks {
		if _, err := script.Parse(b[2], string(b[1])); err != nil {
			t.Errorf("example does not parse: %v\n%s", err, b[2])
		}
	}
}
