package tool

import (
	"context"
	"slices"
)

// Only returns a toolset of the tools of ts named in names (all of them
// when names is empty): one agent's tools out of what a shared client
// offers.
func Only(ts Toolset, names ...string) Toolset {
	if len(names) == 0 {
		return ts
	}
	return FuncSet(func(ctx context.Context) ([]*Tool, error) {
		tools, err := ts.Tools(ctx)
		if err != nil {
			return nil, err
		}
		return slices.DeleteFunc(slices.Clone(tools), func(t *Tool) bool { return !slices.Contains(names, t.Name) }), nil
	})
}
