package main

import (
	"context"
	"slices"

	"github.com/offload-dev/offload/pkg/tool"
)

// withExternal offers the tools of base plus the spec's external tools
// that base does not offer (SPEC §6.1): a call of an external tool that no
// worker serves pauses the run and is answered on
// <prefix>.answer.<conv>.<task>; once a worker serves it, it runs there.
type withExternal struct {
	base     tool.Toolset
	external *tool.Set
}

// Tools implements tool.Toolset.
func (w withExternal) Tools(ctx context.Context) ([]*tool.Tool, error) {
	tools, err := w.base.Tools(ctx)
	if err != nil {
		return nil, err
	}
	ext, err := w.external.Tools(ctx)
	if err != nil {
		return nil, err
	}
	out := slices.Clone(tools)
	for _, t := range ext {
		if !slices.ContainsFunc(tools, func(b *tool.Tool) bool { return b.Name == t.Name }) {
			out = append(out, t)
		}
	}
	return out, nil
}
