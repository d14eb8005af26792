package agentspec

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
)

// LoadNamed reads the spec files and every *.yaml of dir (when set), for
// `agent serve`: each must have a name, and no two the same.
func LoadNamed(files []string, dir string) ([]*Spec, error) {
	if dir != "" {
		more, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
		if err != nil {
			return nil, err
		}
		files = append(slices.Clone(files), more...)
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("no spec given")
	}
	var specs []*Spec
	for _, file := range files {
		s, err := Load(file)
		if err != nil {
			return nil, fmt.Errorf("spec %s: %w", file, err)
		}
		if s.Name == "" || slices.Contains(Names(specs), s.Name) {
			return nil, fmt.Errorf("spec %s: every spec needs a name of its own (name: …)", file)
		}
		specs = append(specs, s)
	}
	return specs, nil
}

// Names returns the specs' names, in order.
func Names(specs []*Spec) []string {
	var names []string
	for _, s := range specs {
		names = append(names, s.Name)
	}
	return names
}

// Union returns the spec of a client several agents share: every spec's
// tools (the first entry of a name) and external tools; and the tools
// named, comma-separated ("" when a spec names none: all are offered).
func Union(specs []*Spec) (*Spec, string) {
	u, all := &Spec{}, false
	for _, s := range specs {
		all = all || s.Tools == nil
		for _, t := range s.Tools {
			if !slices.ContainsFunc(u.Tools, func(x ToolEntry) bool { return x.Name == t.Name }) {
				u.Tools = append(u.Tools, t)
			}
		}
		u.ExternalTools = append(u.ExternalTools, s.ExternalTools...)
	}
	if all {
		return u, ""
	}
	return u, strings.Join(u.ToolNames(), ",")
}
