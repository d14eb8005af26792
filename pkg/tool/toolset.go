package tool

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
)

// Toolset is a source of tools. Tools is called at every step, so a toolset
// may change (a remote toolset follows the workers that come and go).
type Toolset interface {
	Tools(ctx context.Context) ([]*Tool, error)
}

// Set is a fixed toolset of function tools.
type Set struct {
	tools []*Tool
}

var _ Toolset = (*Set)(nil)

// NewSet returns a toolset holding tools. Duplicate names are an error, and
// so are names that do not match [NamePattern] (wrapping [ErrInvalidName]).
func NewSet(tools ...*Tool) (*Set, error) {
	seen := map[string]bool{}
	for _, t := range tools {
		if t == nil {
			return nil, fmt.Errorf("%w: nil tool", ErrInvalidTool)
		}
		if err := ValidateName(t.Name); err != nil {
			return nil, err
		}
		if seen[t.Name] {
			return nil, fmt.Errorf("%w: duplicate tool name %q", ErrInvalidTool, t.Name)
		}
		seen[t.Name] = true
	}
	return &Set{tools: tools}, nil
}

// MustSet is [NewSet] that panics on error.
func MustSet(tools ...*Tool) *Set {
	s, err := NewSet(tools...)
	if err != nil {
		panic(err)
	}
	return s
}

// Tools implements [Toolset].
func (s *Set) Tools(context.Context) ([]*Tool, error) { return s.tools, nil }

// External returns an ExternalToolset: tools executed elsewhere whose calls
// are always deferred. Their schemas are enforced: arguments that do not
// match are sent back to the model (retry budget 0 by default).
func External(defs ...Def) (*Set, error) {
	tools := make([]*Tool, 0, len(defs))
	for _, d := range defs {
		t, err := New(d, nil)
		if err != nil {
			return nil, err
		}
		tools = append(tools, t)
	}
	return NewSet(tools...)
}

// FuncSet adapts a function to a [Toolset].
type FuncSet func(ctx context.Context) ([]*Tool, error)

// Tools implements [Toolset].
func (f FuncSet) Tools(ctx context.Context) ([]*Tool, error) { return f(ctx) }

// WithMetadata returns a toolset whose tools carry kv merged into their
// metadata (bulk marking, e.g. {"background": true}).
func WithMetadata(ts Toolset, kv map[string]any) Toolset {
	return FuncSet(func(ctx context.Context) ([]*Tool, error) {
		tools, err := ts.Tools(ctx)
		if err != nil {
			return nil, err
		}
		out := make([]*Tool, len(tools))
		for i, t := range tools {
			c := t.Clone()
			if c.Metadata == nil {
				c.Metadata = map[string]any{}
			}
			maps.Copy(c.Metadata, DeepCopy(kv))
			out[i] = c
		}
		return out, nil
	})
}

// ApprovalPredicate decides, at execution time, whether a call needs approval.
type ApprovalPredicate func(ctx context.Context, rc *RunContext, t *Tool, args json.RawMessage) bool

// RequireApproval returns a toolset whose calls defer with [ApprovalRequired]
// (no metadata) when they are not yet approved and pred returns true. A nil
// pred requires approval for every call. It runs after argument validation
// and before the tool body, so calls that need no approval run normally.
func RequireApproval(ts Toolset, pred ApprovalPredicate) Toolset {
	return FuncSet(func(ctx context.Context) ([]*Tool, error) {
		tools, err := ts.Tools(ctx)
		if err != nil {
			return nil, err
		}
		out := make([]*Tool, len(tools))
		for i, t := range tools {
			if t.Kind == KindExternal || t.Handler == nil {
				out[i] = t
				continue
			}
			c := t.Clone()
			inner := t.Handler
			c.Handler = func(ctx context.Context, rc *RunContext, args json.RawMessage) (any, error) {
				approved := rc != nil && rc.ToolCallApproved
				if !approved && (pred == nil || pred(ctx, rc, t, args)) {
					return nil, &ApprovalRequired{}
				}
				return inner(ctx, rc, args)
			}
			out[i] = c
		}
		return out, nil
	})
}

// WithFallback returns a toolset offering base's tools, plus those of
// fallback that base does not offer (by name): a name both offer is
// base's (an agent's external tools over any other tool of their name).
func WithFallback(base, fallback Toolset) Toolset {
	return FuncSet(func(ctx context.Context) ([]*Tool, error) {
		tools, err := base.Tools(ctx)
		if err != nil {
			return nil, err
		}
		extra, err := fallback.Tools(ctx)
		if err != nil {
			return nil, err
		}
		out := slices.Clone(tools)
		for _, t := range extra {
			if !slices.ContainsFunc(tools, func(b *Tool) bool { return b.Name == t.Name }) {
				out = append(out, t)
			}
		}
		return out, nil
	})
}

// NotOfferedError says that a tool asked for by name is not offered.
type NotOfferedError struct {
	// Name is the tool asked for.
	Name string
	// Available are the names offered, sorted.
	Available []string
}

// Error implements error.
func (e *NotOfferedError) Error() string {
	list := strings.Join(e.Available, ", ")
	if list == "" {
		list = "none"
	}
	return fmt.Sprintf("tool: no tool %q is offered (available: %s)", e.Name, list)
}

// CheckOffered returns a [*NotOfferedError] for the first name of want that
// none of offered is, nil when every one is.
func CheckOffered(want []string, offered ...[]string) error {
	var avail []string
	for _, names := range offered {
		for _, n := range names {
			if !slices.Contains(avail, n) {
				avail = append(avail, n)
			}
		}
	}
	slices.Sort(avail)
	for _, name := range want {
		if !slices.Contains(avail, name) {
			return &NotOfferedError{Name: name, Available: avail}
		}
	}
	return nil
}

// Names returns the names of tools, in order.
func Names(tools []*Tool) []string {
	names := make([]string, len(tools))
	for i, t := range tools {
		names[i] = t.Name
	}
	return names
}
