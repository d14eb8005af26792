package background

import (
	"context"
	"fmt"
	"reflect"
	"slices"

	"github.com/offload-dev/offload/pkg/agent"
	"github.com/offload-dev/offload/pkg/tool"
)

// Selector chooses the tools that [Tools] always runs in the
// background. Build one with [SelectMetadata], [SelectNames], [SelectAll]
// or [SelectFunc].
type Selector struct {
	match func(ctx context.Context, info *agent.RunInfo, t *tool.Tool) bool
}

// Matches reports whether the selector chooses t. The zero Selector
// chooses the tools whose metadata has background: true.
func (s Selector) Matches(ctx context.Context, info *agent.RunInfo, t *tool.Tool) bool {
	if s.match == nil {
		return DefaultSelector.Matches(ctx, info, t)
	}
	return s.match(ctx, info, t)
}

// DefaultSelector chooses the tools whose metadata has background: true.
var DefaultSelector = SelectMetadata(map[string]any{"background": true})

// SelectMetadata chooses the tools whose metadata includes every key of kv
// with an equal value (nested maps are included recursively).
func SelectMetadata(kv map[string]any) Selector {
	kv = tool.DeepCopy(kv)
	return Selector{match: func(_ context.Context, _ *agent.RunInfo, t *tool.Tool) bool { return includes(t.Metadata, kv) }}
}

// SelectNames chooses the tools with the given names.
func SelectNames(names ...string) Selector {
	names = slices.Clone(names)
	return Selector{match: func(_ context.Context, _ *agent.RunInfo, t *tool.Tool) bool { return slices.Contains(names, t.Name) }}
}

// SelectAll chooses every tool.
func SelectAll() Selector {
	return Selector{match: func(context.Context, *agent.RunInfo, *tool.Tool) bool { return true }}
}

// SelectFunc chooses the tools for which fn reports true.
func SelectFunc(fn func(ctx context.Context, info *agent.RunInfo, t *tool.Tool) bool) Selector {
	return Selector{match: fn}
}

// SelectorFromSpec builds a selector from its form in an agent spec
// (SPEC §6.1, capabilities: [{BackgroundTools: {tools: <selector>}}]):
// "all"; a tool name; a list of names; or a map of metadata the tools must
// include. A nil spec is the default selector.
func SelectorFromSpec(spec any) (Selector, error) {
	switch v := spec.(type) {
	case nil:
		return DefaultSelector, nil
	case string:
		if v == "all" {
			return SelectAll(), nil
		}
		return SelectNames(v), nil
	case []string:
		return SelectNames(v...), nil
	case []any:
		names := make([]string, 0, len(v))
		for _, n := range v {
			s, ok := n.(string)
			if !ok {
				return Selector{}, fmt.Errorf("%w: BackgroundTools tools: a list must hold tool names, got %T", agent.ErrInvalidConfig, n)
			}
			names = append(names, s)
		}
		return SelectNames(names...), nil
	case map[string]any:
		return SelectMetadata(v), nil
	default:
		return Selector{}, fmt.Errorf("%w: BackgroundTools tools: want \"all\", a name, a list of names or a metadata map, got %T", agent.ErrInvalidConfig, spec)
	}
}

// includes reports whether have deeply includes every entry of want.
func includes(have, want map[string]any) bool {
	for k, w := range want {
		h, ok := have[k]
		if !ok {
			return false
		}
		wm, wIsMap := w.(map[string]any)
		hm, hIsMap := h.(map[string]any)
		switch {
		case wIsMap && hIsMap:
			if !includes(hm, wm) {
				return false
			}
		case wIsMap || hIsMap:
			return false
		case !reflect.DeepEqual(h, w):
			return false
		}
	}
	return true
}
