package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strings"

	"go.yaml.in/yaml/v3"
)

// List is the document of mutations.yaml.
type List struct {
	// Packages are the packages whose tests must catch every mutation.
	Packages []string `yaml:"packages"`
	// Mutations are applied one at a time.
	Mutations []Mutation `yaml:"mutations"`
}

// Mutation is one one-line change of a source file.
type Mutation struct {
	Name    string `yaml:"name"`
	File    string `yaml:"file"`
	Find    string `yaml:"find"`
	Replace string `yaml:"replace"`
}

// errStale is returned when a mutation's text does not occur exactly once.
var errStale = errors.New("stale mutation")

// loadList reads and checks a list of mutations.
func loadList(path string) (*List, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var l List
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&l); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(l.Packages) == 0 || len(l.Mutations) == 0 {
		return nil, fmt.Errorf("%s: needs packages and mutations", path)
	}
	names := map[string]bool{}
	for i, m := range l.Mutations {
		switch {
		case m.Name == "" || m.File == "" || m.Find == "":
			return nil, fmt.Errorf("%s: mutation %d: name, file and find are required", path, i+1)
		case strings.Contains(m.Find, "\n") || strings.Contains(m.Replace, "\n"):
			return nil, fmt.Errorf("%s: mutation %q: find and replace must be one line", path, m.Name)
		case m.Find == m.Replace:
			return nil, fmt.Errorf("%s: mutation %q: replace equals find", path, m.Name)
		case names[m.Name]:
			return nil, fmt.Errorf("%s: mutation %q listed twice", path, m.Name)
		}
		names[m.Name] = true
	}
	return &l, nil
}

// apply returns src with the mutation applied, and the 1-based line it
// changed. The text must occur exactly once in src; a leading "^" anchors
// it at the start of a line (so that "^\tx" does not match "\t\tx").
func (m Mutation) apply(src []byte) ([]byte, int, error) {
	find := []byte(m.Find)
	var idx []int
	if anchored := bytes.HasPrefix(find, []byte("^")); anchored {
		find = find[1:]
		for i := 0; i+len(find) <= len(src); {
			j := bytes.Index(src[i:], find)
			if j < 0 {
				break
			}
			if at := i + j; at == 0 || src[at-1] == '\n' {
				idx = append(idx, at)
			}
			i += j + 1
		}
	} else {
		for i := 0; ; {
			j := bytes.Index(src[i:], find)
			if j < 0 {
				break
			}
			idx = append(idx, i+j)
			i += j + 1
		}
	}
	switch n := len(idx); n {
	case 1:
	case 0:
		return nil, 0, fmt.Errorf("%w: %q not found in %s", errStale, m.Find, m.File)
	default:
		return nil, 0, fmt.Errorf("%w: %q occurs %d times in %s; make it unique", errStale, m.Find, n, m.File)
	}
	i := idx[0]
	line := bytes.Count(src[:i], []byte("\n")) + 1
	out := make([]byte, 0, len(src)-len(find)+len(m.Replace))
	out = append(out, src[:i]...)
	out = append(out, m.Replace...)
	out = append(out, src[i+len(find):]...)
	return out, line, nil
}
