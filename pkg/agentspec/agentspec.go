// Package agentspec reads an agent's spec: the YAML file `agent --spec`
// takes (SPEC §6.1), which gives an agent its model, instructions, limits,
// tools, approval mode, capabilities, external tools and model settings.
// A spec is decoded strictly (an unknown key is an error) and validated as
// a whole, so that a process that loads one (`agent run`, `agent serve`)
// refuses a bad spec before it starts, naming the key at fault; its
// [Spec.Digest] identifies the file a conversation was run with.
package agentspec

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/offload-dev/offload/pkg/agent/background"
	"github.com/offload-dev/offload/pkg/limits"
	"github.com/offload-dev/offload/pkg/protocol"
	"github.com/offload-dev/offload/pkg/tool"
)

// Spec is an agent's spec, as its YAML file gives it. Unknown keys are an
// error. Fields left out of the file are nil or empty: whoever applies the
// spec keeps its own defaults for them.
type Spec struct {
	// Name is the agent's name, subject-safe (a tool name's characters):
	// `agent serve` records it on every conversation it starts and
	// continues a conversation only with the agent of that name (SPEC
	// §11). Optional elsewhere.
	Name string `yaml:"name"`
	// Model is the model reference: openai:NAME, test or script:FILE.
	Model string `yaml:"model"`
	// Description says what the agent does, for those who call it as a
	// tool (agent serve --mcp, SPEC §17); without it, the first line of
	// its instructions does ([Spec.Summary]).
	Description string `yaml:"description"`
	// Instructions replace the agent's instructions when set.
	Instructions *string `yaml:"instructions"`
	// Limits bound the run.
	Limits *Limits `yaml:"limits"`
	// Tools restricts the tools offered to these names; an entry may also
	// pin the agent's policy for its tool (see [ToolEntry]).
	Tools []ToolEntry `yaml:"tools"`
	// Approve is how approvals are decided: one of [ApproveModes].
	Approve string `yaml:"approve"`
	// Approval, if set, is the expiry of the agent's approvals (SPEC
	// §12; agent run, resume and serve), for every tool whose metadata
	// sets none.
	Approval *Approval `yaml:"approval"`
	// Capabilities are the agent's capabilities, in order.
	Capabilities []Capability `yaml:"capabilities"`
	// ExternalTools are tools answered from outside (an ExternalToolset):
	// a call of one that no worker serves pauses the run.
	ExternalTools []ExternalTool `yaml:"external_tools"`
	// ModelSettings configure the model's requests and transport.
	ModelSettings *ModelSettings `yaml:"model_settings"`
	// Tenant, if set, is the tenant (SPEC §19) of the conversations the
	// agent starts when none is given (agent run --tenant, agent serve's
	// API field or a token bound to a tenant win): it travels on each of
	// their tasks, and workers key limits by it.
	Tenant string `yaml:"tenant"`

	// Digest is "sha256:" and the hex SHA-256 of the file's bytes, set by
	// [Parse] and [Load]: what identifies the spec a conversation ran
	// with.
	Digest string `yaml:"-"`
}

// Approval is an approval's expiry and quorum (SPEC §12): when no decision
// is stored within Timeout of the announcement, the server writes the
// decision OnTimeout says; with Required above 1, a call runs once that
// many distinct authenticated identities approved it.
type Approval struct {
	// Timeout, if set, is a positive Go duration ("30m"); required
	// unless Required is.
	Timeout string `yaml:"timeout"`
	// OnTimeout is deny (the default), approve, or fail (the run reading
	// the expiry ends with an error naming the call).
	OnTimeout string `yaml:"on_timeout"`
	// Message, for a denial, is told to the model.
	Message string `yaml:"message"`
	// Required, when above 1, is the quorum (SPEC §12): how many distinct
	// authenticated identities must approve a call before it runs.
	Required int `yaml:"required"`
}

// Map is the approval in its map form (the form of a tool's metadata
// "approval"), for session.ParseApprovalPolicy.
func (a *Approval) Map() map[string]any {
	m := map[string]any{}
	if a.Timeout != "" {
		m["timeout"] = a.Timeout
	}
	if a.Required != 0 {
		m["required"] = a.Required
	}
	if a.OnTimeout != "" {
		m["on_timeout"] = a.OnTimeout
	}
	if a.Message != "" {
		m["message"] = a.Message
	}
	return m
}

// Limits are a spec's usage limits.
type Limits struct {
	// Requests bounds the model requests (at least 1).
	Requests *int `yaml:"requests"`
	// ToolCalls bounds the successful tool calls.
	ToolCalls *int `yaml:"tool_calls"`
	// Tokens bounds the tokens used.
	Tokens *int `yaml:"tokens"`
}

// Capability holds exactly one capability.
type Capability struct {
	// BackgroundTools runs the tools its selector chooses in the
	// background.
	BackgroundTools *BackgroundTools `yaml:"BackgroundTools"`
}

// BackgroundTools is the BackgroundTools capability of a spec.
type BackgroundTools struct {
	// Tools is the selector: {metadata-key: value}, a list of names, or
	// "all"; absent means {background: true}.
	Tools yaml.Node `yaml:"tools"`
}

// ToolEntry is an item of tools: a tool's name, or an object
// {name, requires_approval, description, parameters} that also pins the
// agent's policy for the tool, which no worker's registry entry overrides
// (SPEC §5.4): requires_approval true makes every call wait for a
// person's approval whatever a worker advertises (false leaves it to the
// worker, who may still require it), and a description or parameters
// given are what the model is offered and what the arguments are
// validated against.
type ToolEntry struct {
	// Name is the tool's name.
	Name string `yaml:"name"`
	// RequiresApproval, when true, makes every call of the tool wait for
	// approval, whatever its source advertises.
	RequiresApproval bool `yaml:"requires_approval"`
	// Description, when given, is what the model is offered.
	Description string `yaml:"description"`
	// Parameters, when given, is the JSON Schema of the arguments: offered
	// to the model and enforced.
	Parameters map[string]any `yaml:"parameters"`
	// Limits, when given, are the agent's own fleet control limits for
	// the tool's calls (SPEC §19): carried by each task, they hold beside
	// the worker's, the stricter winning.
	Limits *limits.Limits `yaml:"limits"`
}

// toolEntryKeys are the keys of a ToolEntry object.
var toolEntryKeys = []string{"name", "requires_approval", "description", "parameters", "limits"}

// UnmarshalYAML decodes a name or an object; an unknown key of the object
// is an error, as in the rest of the spec.
func (e *ToolEntry) UnmarshalYAML(n *yaml.Node) error {
	switch n.Kind {
	case yaml.ScalarNode:
		*e = ToolEntry{Name: n.Value}
		return nil
	case yaml.MappingNode:
		for i := 0; i < len(n.Content); i += 2 {
			if k := n.Content[i].Value; !slices.Contains(toolEntryKeys, k) {
				return fmt.Errorf("line %d: field %s not found in a tool entry (keys: %s)", n.Content[i].Line, k, strings.Join(toolEntryKeys, ", "))
			}
		}
		type plain ToolEntry // without this method
		var p plain
		if err := n.Decode(&p); err != nil {
			return err
		}
		*e = ToolEntry(p)
		return nil
	}
	return fmt.Errorf("line %d: a tool entry is a name or {%s}", n.Line, strings.Join(toolEntryKeys, ", "))
}

// pins reports whether the entry pins anything of the tool's policy.
func (e ToolEntry) pins() bool {
	return e.RequiresApproval || e.Description != "" || e.Parameters != nil || e.Limits != nil
}

// ExternalTool is a tool answered from outside the agent.
type ExternalTool struct {
	Name        string         `yaml:"name"`
	Description string         `yaml:"description"`
	Parameters  map[string]any `yaml:"parameters"`
	Metadata    map[string]any `yaml:"metadata"`
}

// ModelSettings are a spec's model settings: request settings and
// transport.
type ModelSettings struct {
	Stream            *bool          `yaml:"stream"`
	StreamUsage       *bool          `yaml:"stream_usage"`
	Temperature       *float64       `yaml:"temperature"`
	MaxTokens         *int           `yaml:"max_tokens"`
	ParallelToolCalls *bool          `yaml:"parallel_tool_calls"`
	IdleTimeout       *string        `yaml:"idle_timeout"`
	Retries           *int           `yaml:"retries"`
	ExtraBody         map[string]any `yaml:"extra_body"`
}

// ApproveModes are the values of approve (and of `agent --approve`).
var ApproveModes = []string{"ask", "wait", "defer", "all", "none", "background"}

// Load reads the spec file at path (see [Parse]).
func Load(path string) (*Spec, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return Parse(raw)
}

// Parse strictly decodes one YAML document and validates it (see
// [Spec.Validate]).
func Parse(raw []byte) (*Spec, error) {
	dec := yaml.NewDecoder(bytes.NewReader(raw))
	dec.KnownFields(true)
	var s Spec
	if err := dec.Decode(&s); err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	var extra any
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return nil, errors.New("more than one YAML document")
	}
	sum := sha256.Sum256(raw)
	s.Digest = "sha256:" + hex.EncodeToString(sum[:])
	return &s, s.Validate()
}

// Validate checks what the YAML types do not: the approve mode, tool
// names, limits, selectors, external tools and model settings. Its errors
// name the key at fault.
func (s *Spec) Validate() error {
	if s.Name != "" {
		if err := tool.ValidateName(s.Name); err != nil {
			return fmt.Errorf("name: %w", err)
		}
	}
	if err := protocol.ValidateTenant(s.Tenant); err != nil {
		return fmt.Errorf("tenant: %w", err)
	}
	if s.Approve != "" && !slices.Contains(ApproveModes, s.Approve) {
		return fmt.Errorf("approve: %q is not one of %s", s.Approve, strings.Join(ApproveModes, ", "))
	}
	if err := s.validateTools(); err != nil {
		return err
	}
	if a := s.Approval; a != nil {
		if a.Required < 0 {
			return fmt.Errorf("approval.required: %d is not a positive number", a.Required)
		}
		if d, err := time.ParseDuration(a.Timeout); (a.Timeout != "" || a.Required == 0) && (err != nil || d <= 0) {
			return fmt.Errorf("approval.timeout: %q is not a positive duration", a.Timeout)
		}
		switch a.OnTimeout {
		case "", "deny", "approve", "fail":
		default:
			return fmt.Errorf("approval.on_timeout: %q is not deny, approve or fail", a.OnTimeout)
		}
	}
	if l := s.Limits; l != nil {
		for name, v := range map[string]*int{"requests": l.Requests, "tool_calls": l.ToolCalls, "tokens": l.Tokens} {
			if v != nil && *v < 0 {
				return fmt.Errorf("limits.%s must not be negative", name)
			}
		}
		if l.Requests != nil && *l.Requests < 1 {
			return errors.New("limits.requests must be at least 1")
		}
	}
	for i, c := range s.Capabilities {
		if c.BackgroundTools == nil {
			return fmt.Errorf("capabilities[%d]: expected {BackgroundTools: {tools: <selector>}}", i)
		}
		if err := validateSelector(&c.BackgroundTools.Tools); err != nil {
			return fmt.Errorf("capabilities[%d].BackgroundTools.tools: %w", i, err)
		}
	}
	defs := make([]tool.Def, 0, len(s.ExternalTools))
	for i, t := range s.ExternalTools {
		var params json.RawMessage
		if t.Parameters != nil {
			b, err := json.Marshal(t.Parameters)
			if err != nil {
				return fmt.Errorf("external_tools[%d].parameters: %w", i, err)
			}
			params = b
		}
		defs = append(defs, tool.Def{Name: t.Name, Description: t.Description, Parameters: params, Metadata: t.Metadata})
	}
	if _, err := tool.External(defs...); err != nil {
		return fmt.Errorf("external_tools: %w", err)
	}
	if ms := s.ModelSettings; ms != nil {
		if ms.IdleTimeout != nil {
			d, err := time.ParseDuration(*ms.IdleTimeout)
			if err != nil || d < 0 {
				return fmt.Errorf("model_settings.idle_timeout: %q is not a duration such as 30s", *ms.IdleTimeout)
			}
		}
		if ms.Retries != nil && *ms.Retries < 0 {
			return errors.New("model_settings.retries must not be negative")
		}
		if ms.MaxTokens != nil && *ms.MaxTokens < 0 {
			return errors.New("model_settings.max_tokens must not be negative")
		}
		if _, err := json.Marshal(ms.ExtraBody); err != nil {
			return fmt.Errorf("model_settings.extra_body: %w", err)
		}
	}
	return nil
}

// validateTools checks the entries of tools: valid names, each once, a
// pinned schema that is an object schema, and no pinned policy for a tool
// of external_tools (its definition is there).
func (s *Spec) validateTools() error {
	seen := map[string]bool{}
	for i, e := range s.Tools {
		if err := tool.ValidateName(e.Name); err != nil {
			return fmt.Errorf("tools[%d]: %w", i, err)
		}
		if seen[e.Name] {
			return fmt.Errorf("tools[%d]: %s is listed twice", i, e.Name)
		}
		seen[e.Name] = true
		if !e.pins() {
			continue
		}
		if err := e.Limits.Validate(); err != nil {
			return fmt.Errorf("tools[%d].limits: %w", i, err)
		}
		if slices.ContainsFunc(s.ExternalTools, func(x ExternalTool) bool { return x.Name == e.Name }) {
			return fmt.Errorf("tools[%d]: %s is an external tool: its description and parameters are those of external_tools", i, e.Name)
		}
		if e.Parameters != nil {
			params, err := json.Marshal(e.Parameters)
			if err != nil {
				return fmt.Errorf("tools[%d].parameters: %w", i, err)
			}
			if _, err := tool.New(tool.Def{Name: e.Name, Parameters: params}, nil); err != nil {
				return fmt.Errorf("tools[%d].parameters: %w", i, err)
			}
		}
	}
	return nil
}

// Summary is what the agent does, in a line: its Description, else the
// first non-empty line of its instructions ("" when it has neither).
func (s *Spec) Summary() string {
	if s == nil {
		return ""
	}
	if d := strings.TrimSpace(s.Description); d != "" {
		return d
	}
	if s.Instructions == nil {
		return ""
	}
	for _, line := range strings.Split(*s.Instructions, "\n") {
		if line = strings.TrimSpace(line); line != "" {
			return line
		}
	}
	return ""
}

// ToolNames returns the names of tools, in order (nil when the spec
// lists none: every tool is offered).
func (s *Spec) ToolNames() []string {
	if s == nil || s.Tools == nil {
		return nil
	}
	names := make([]string, len(s.Tools))
	for i, e := range s.Tools {
		names[i] = e.Name
	}
	return names
}

// Policies returns the agent's policies for tools that the spec gives
// (none for a nil spec), by name: those the entries of tools pin, and the
// external tools, which no worker's tool of the name replaces.
func (s *Spec) Policies() map[string]tool.Policy {
	if s == nil {
		return nil
	}
	out := map[string]tool.Policy{}
	for _, e := range s.Tools {
		if !e.pins() {
			continue
		}
		p := tool.Policy{RequiresApproval: e.RequiresApproval, Description: e.Description, Limits: e.Limits}
		if e.Parameters != nil {
			p.Parameters, _ = json.Marshal(e.Parameters) // validated
		}
		out[e.Name] = p
	}
	for _, t := range s.ExternalTools {
		out[t.Name] = tool.Policy{External: true}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// validateSelector checks a BackgroundTools selector: {key: scalar, ...},
// a list of tool names, or "all".
func validateSelector(n *yaml.Node) error {
	switch n.Kind {
	case 0: // absent: the default {background: true}
		return nil
	case yaml.ScalarNode:
		if n.Value != "all" {
			return fmt.Errorf("line %d: %q: use {metadata-key: value}, a list of names, or all", n.Line, n.Value)
		}
	case yaml.SequenceNode:
		for _, c := range n.Content {
			if c.Kind != yaml.ScalarNode {
				return fmt.Errorf("line %d: a list of tool names holds only names", c.Line)
			}
			if err := tool.ValidateName(c.Value); err != nil {
				return fmt.Errorf("line %d: %w", c.Line, err)
			}
		}
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			if n.Content[i+1].Kind != yaml.ScalarNode {
				return fmt.Errorf("line %d: metadata %q must match a plain value", n.Content[i].Line, n.Content[i].Value)
			}
		}
	default:
		return fmt.Errorf("line %d: use {metadata-key: value}, a list of names, or all", n.Line)
	}
	return nil
}

// Selectors returns the selectors of the spec's BackgroundTools
// capabilities, in order: none when it has none (the caller's default
// applies).
func (s *Spec) Selectors() ([]background.Selector, error) {
	var out []background.Selector
	for i, c := range s.Capabilities {
		var v any
		if c.BackgroundTools.Tools.Kind != 0 {
			if err := c.BackgroundTools.Tools.Decode(&v); err != nil {
				return nil, fmt.Errorf("capabilities[%d].BackgroundTools.tools: %w", i, err)
			}
		}
		sel, err := background.SelectorFromSpec(v)
		if err != nil {
			return nil, fmt.Errorf("capabilities[%d]: %w", i, err)
		}
		out = append(out, sel)
	}
	return out, nil
}

// ExternalDefs returns the definitions of the spec's external tools (none
// for a nil spec).
func (s *Spec) ExternalDefs() []tool.Def {
	if s == nil {
		return nil
	}
	var out []tool.Def
	for _, t := range s.ExternalTools {
		var params json.RawMessage
		if t.Parameters != nil {
			params, _ = json.Marshal(t.Parameters) // validated
		}
		out = append(out, tool.Def{Name: t.Name, Description: t.Description, Parameters: params, Metadata: t.Metadata})
	}
	return out
}

// IdleTimeout returns model_settings.idle_timeout, and whether it is set.
func (s *Spec) IdleTimeout() (time.Duration, bool) {
	if s.ModelSettings == nil || s.ModelSettings.IdleTimeout == nil {
		return 0, false
	}
	d, _ := time.ParseDuration(*s.ModelSettings.IdleTimeout) // validated
	return d, true
}
