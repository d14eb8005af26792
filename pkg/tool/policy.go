package tool

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"sync"

	"github.com/offload-dev/offload/pkg/limits"
)

// Policy is an agent's own policy for the tool of a name: what it decides
// whatever the tool's source advertises (a worker's registry entry, SPEC
// §5.4). An advertisement can add approval, never remove it; a pinned
// description and schema are what the model is offered and what the
// arguments are validated against; a name declared external is answered
// by a person, never by a tool of that name from elsewhere.
type Policy struct {
	// RequiresApproval makes every call wait for a person's approval,
	// whatever the tool says. False leaves it to the tool, which may
	// require it.
	RequiresApproval bool
	// Description, when not empty, is shown to the model instead of the
	// tool's.
	Description string
	// Parameters, when set, is the JSON Schema of the arguments instead of
	// the tool's: the model is offered it and the arguments are validated
	// against it.
	Parameters json.RawMessage
	// External declares the tool external (an ExternalToolset's): a tool
	// of the name that is not external is not offered.
	External bool
	// Limits, when set, are the agent's own fleet control limits for the
	// tool's calls (SPEC §19): a remote call's task carries them, and its
	// worker holds the call to them beside its own, the stricter winning.
	Limits *limits.Limits
}

// The fields a [Difference] names.
const (
	FieldRequiresApproval = "requires_approval"
	FieldDescription      = "description"
	FieldParameters       = "parameters"
	FieldExternal         = "external"
)

// Difference is one way a tool's definition departs from the agent's
// [Policy] for it.
type Difference struct {
	// Field is FieldRequiresApproval, FieldDescription, FieldParameters or
	// FieldExternal.
	Field string
	// Detail says how, in words.
	Detail string
}

// String returns "<field>: <detail>".
func (d Difference) String() string { return d.Field + ": " + d.Detail }

// JoinDifferences returns the differences as one line, "; " between them.
func JoinDifferences(ds []Difference) string {
	parts := make([]string, len(ds))
	for i, d := range ds {
		parts[i] = d.String()
	}
	return strings.Join(parts, "; ")
}

// Diff returns how def departs from p, in the order of [Policy]'s fields:
// none when def keeps to it. Approval that def requires and p does not is
// no departure (an advertisement may add approval).
func (p Policy) Diff(def Def) []Difference {
	var out []Difference
	if p.External {
		// Nothing else of it matters: it is not offered.
		return []Difference{{FieldExternal, "the agent declares " + def.Name + " an external tool, answered by a person: this one is not offered"}}
	}
	if p.RequiresApproval && !def.RequiresApproval {
		out = append(out, Difference{FieldRequiresApproval, "advertised without approval; the agent requires it"})
	}
	if p.Description != "" && def.Description != p.Description {
		out = append(out, Difference{FieldDescription, fmt.Sprintf("advertised as %q; the agent's is %q", clip(def.Description), clip(p.Description))})
	}
	if p.Parameters != nil && !SameSchema(def.Parameters, p.Parameters) {
		out = append(out, Difference{FieldParameters, fmt.Sprintf("advertised %s; the agent's is %s", clip(string(compactJSON(def.Parameters))), clip(string(compactJSON(p.Parameters))))})
	}
	return out
}

// Hold returns def held to p: p's description and parameters where it
// pins them, approval when either requires it. The caller does not offer
// a tool that p declares external.
func (p Policy) Hold(def Def) Def {
	if p.Description != "" {
		def.Description = p.Description
	}
	if p.Parameters != nil {
		def.Parameters = p.Parameters
	}
	def.RequiresApproval = def.RequiresApproval || p.RequiresApproval
	return def
}

// Apply returns t held to p (see [Policy.Hold]): t itself when it keeps
// to p already, else a copy, its schema compiled again when p pins
// another. A pinned schema that is not an object schema is an error.
func (p Policy) Apply(t *Tool) (*Tool, error) {
	desc := p.Description != "" && t.Description != p.Description
	approval := p.RequiresApproval && !t.RequiresApproval
	params := p.Parameters != nil && !SameSchema(t.Parameters, p.Parameters)
	if !desc && !approval && !params {
		return t, nil
	}
	c := t.Clone()
	if params {
		var err error
		if c, err = t.WithParameters(p.Parameters); err != nil {
			return nil, err
		}
	}
	if desc {
		c.Description = p.Description
	}
	c.RequiresApproval = c.RequiresApproval || p.RequiresApproval
	return c, nil
}

// SameSchema reports whether two JSON Schemas are the same JSON value
// (an empty one is the schema of no parameters,
// {"type":"object","properties":{}}).
func SameSchema(a, b json.RawMessage) bool {
	a, b = orEmpty(a), orEmpty(b)
	if bytes.Equal(a, b) {
		return true
	}
	var va, vb any
	if json.Unmarshal(a, &va) != nil || json.Unmarshal(b, &vb) != nil {
		return false
	}
	return reflect.DeepEqual(va, vb)
}

func orEmpty(s json.RawMessage) json.RawMessage {
	if t := bytes.TrimSpace(s); len(t) == 0 || bytes.Equal(t, []byte("null")) {
		return emptySchema
	}
	return s
}

// compactJSON returns s compacted, or as it is when it is not JSON.
func compactJSON(s json.RawMessage) []byte {
	s = orEmpty(s)
	var buf bytes.Buffer
	if json.Compact(&buf, s) != nil {
		return s
	}
	return buf.Bytes()
}

// clip shortens s for a log line or a diagnostic: at most 120 bytes.
func clip(s string) string {
	const most = 120
	if len(s) <= most {
		return s
	}
	cut := most
	for cut > 0 && s[cut]&0xC0 == 0x80 { // not inside a UTF-8 sequence
		cut--
	}
	return s[:cut] + "…"
}

// WithPolicies returns a toolset offering ts's tools held to the policies
// of their names (see [Policy.Apply]); a tool that a policy declares
// external is left out unless it is external itself. A tool whose pinned
// schema cannot be compiled is an error of Tools. The tools held are kept
// (one per name) until ts offers another tool of the name.
func WithPolicies(ts Toolset, policies map[string]Policy) Toolset {
	if len(policies) == 0 {
		return ts
	}
	w := &policed{ts: ts, policies: policies, held: map[string][2]*Tool{}}
	return FuncSet(w.tools)
}

type policed struct {
	ts       Toolset
	policies map[string]Policy

	mu   sync.Mutex
	held map[string][2]*Tool // by name: the tool ts offered, and it held
}

func (w *policed) tools(ctx context.Context) ([]*Tool, error) {
	tools, err := w.ts.Tools(ctx)
	if err != nil {
		return nil, err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make([]*Tool, 0, len(tools))
	for _, t := range tools {
		p, ok := w.policies[t.Name]
		switch {
		case !ok:
			out = append(out, t)
			continue
		case p.External && t.Kind != KindExternal:
			continue
		}
		if h, ok := w.held[t.Name]; ok && h[0] == t {
			out = append(out, h[1])
			continue
		}
		c, err := p.Apply(t)
		if err != nil {
			return nil, fmt.Errorf("tool %s held to the agent's policy: %w", t.Name, err)
		}
		w.held[t.Name] = [2]*Tool{t, c}
		out = append(out, c)
	}
	return out, nil
}
