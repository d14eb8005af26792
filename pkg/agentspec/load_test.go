package agentspec_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/offload-dev/offload/pkg/agentspec"
)

func TestLoadNamedAndUnion(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	a := write("a.yaml", "name: ops\ntools: [sleep, shell]\n")
	write("b.yaml", "name: billing\ntools: [sleep, http_fetch]\n")
	specs, err := agentspec.LoadNamed(nil, dir)
	if err != nil || strings.Join(agentspec.Names(specs), ",") != "ops,billing" {
		t.Fatalf("LoadNamed: %v, %v", agentspec.Names(specs), err)
	}
	if _, tools := agentspec.Union(specs); tools != "sleep,shell,http_fetch" {
		t.Errorf("union tools %q", tools)
	}
	if _, err := agentspec.LoadNamed([]string{a}, dir); err == nil {
		t.Error("two specs named ops accepted")
	}
	if _, err := agentspec.LoadNamed([]string{write("c.yml", "model: test\n")}, ""); err == nil {
		t.Error("a spec without a name accepted")
	}
	all, _ := agentspec.LoadNamed([]string{write("d.yml", "name: any\n")}, "")
	if _, tools := agentspec.Union(all); tools != "" {
		t.Errorf("a spec naming no tools: union %q, want all", tools)
	}
}
