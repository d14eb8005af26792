package main

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func TestApply(t *testing.T) {
	src := []byte("a := 1\nif used >= max {\nb := 2\n")
	m := Mutation{Name: "n", File: "f.go", Find: "used >= max", Replace: "used > max"}
	out, line, err := m.apply(src)
	if err != nil || line != 2 || string(out) != "a := 1\nif used > max {\nb := 2\n" {
		t.Fatalf("apply = %q line %d err %v", out, line, err)
	}
	nested := []byte("\tx()\n\t\tx()\n")
	m.Find, m.Replace = "^\t\tx()", "\t\ty()"
	if out, line, err := m.apply(nested); err != nil || line != 2 || string(out) != "\tx()\n\t\ty()\n" {
		t.Fatalf("anchored apply = %q line %d err %v", out, line, err)
	}
	m.Find = "\tx()" // unanchored, it matches both lines
	if _, _, err := m.apply(nested); !errors.Is(err, errStale) {
		t.Errorf("unanchored find in two lines: err = %v, want errStale", err)
	}
	for _, find := range []string{"absent", ":= "} { // missing, then twice
		m.Find = find
		if _, _, err := m.apply(src); !errors.Is(err, errStale) {
			t.Errorf("find %q: err = %v, want errStale", find, err)
		}
	}
}

func TestLoadListRefusesBadEntries(t *testing.T) {
	for name, doc := range map[string]string{
		"two lines":     "packages: [./x]\nmutations:\n  - {name: a, file: f.go, find: \"x\\ny\", replace: z}\n",
		"no-op":         "packages: [./x]\nmutations:\n  - {name: a, file: f.go, find: x, replace: x}\n",
		"duplicate":     "packages: [./x]\nmutations:\n  - {name: a, file: f.go, find: x, replace: y}\n  - {name: a, file: f.go, find: y, replace: x}\n",
		"unknown field": "packages: [./x]\nmutations:\n  - {name: a, file: f.go, find: x, replace: y, line: 3}\n",
		"no packages":   "mutations:\n  - {name: a, file: f.go, find: x, replace: y}\n",
	} {
		p := filepath.Join(t.TempDir(), "m.yaml")
		if err := os.WriteFile(p, []byte(doc), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := loadList(p); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// The list kept in the repository loads, and every entry matches the code
// exactly once: a refactoring that makes an entry stale fails here, in
// make test, not only in make mutate.
func TestMutationsListIsCurrent(t *testing.T) {
	l, err := loadList("mutations.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range l.Mutations {
		src, err := os.ReadFile(filepath.Join("..", "..", m.File))
		if err != nil {
			t.Errorf("%s: %v", m.Name, err)
			continue
		}
		if _, _, err := m.apply(src); err != nil {
			t.Errorf("%s: %v", m.Name, err)
		}
	}
}
