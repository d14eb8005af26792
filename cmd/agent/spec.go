package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"go.yaml.in/yaml/v3"

	"github.com/offload-dev/offload/pkg/agent"
	"github.com/offload-dev/offload/pkg/tool"
)

// specFile is the YAML of --spec (SPEC §6.1). Unknown keys are an error.
type specFile struct {
	Model         string             `yaml:"model"`
	Instructions  *string            `yaml:"instructions"`
	Limits        *specLimits        `yaml:"limits"`
	Tools         []string           `yaml:"tools"`
	Approve       string             `yaml:"approve"`
	Capabilities  []specCapability   `yaml:"capabilities"`
	ExternalTools []specExternalTool `yaml:"external_tools"`
	ModelSettings *specModelSettings `yaml:"model_settings"`
}

type specLimits struct {
	Requests  *int `yaml:"requests"`
	ToolCalls *int `yaml:"tool_calls"`
	Tokens    *int `yaml:"tokens"`
}

// specCapability holds exactly one capability.
type specCapability struct {
	BackgroundTools *struct {
		// Tools is the selector: {metadata-key: value}, a list of names,
		// or "all"; absent means {background: true}.
		Tools yaml.Node `yaml:"tools"`
	} `yaml:"BackgroundTools"`
}

type specExternalTool struct {
	Name        string         `yaml:"name"`
	Description string         `yaml:"description"`
	Parameters  map[string]any `yaml:"parameters"`
	Metadata    map[string]any `yaml:"metadata"`
}

type specModelSettings struct {
	Stream            *bool          `yaml:"stream"`
	StreamUsage       *bool          `yaml:"stream_usage"`
	Temperature       *float64       `yaml:"temperature"`
	MaxTokens         *int           `yaml:"max_tokens"`
	ParallelToolCalls *bool          `yaml:"parallel_tool_calls"`
	IdleTimeout       *string        `yaml:"idle_timeout"`
	Retries           *int           `yaml:"retries"`
	ExtraBody         map[string]any `yaml:"extra_body"`
}

// specExtras are the parts of a spec that have no flag.
type specExtras struct {
	instructions *string
	tokens       *int
	// background holds the selectors of the spec's BackgroundTools
	// capabilities; none means one capability with the default selector.
	background []agent.Selector
	// external are the spec's external_tools.
	external []tool.Def
	// unapplied names the validated sections whose features have not
	// landed yet.
	unapplied []string
}

// apply sets what the spec gave on an agent configuration.
func (x *specExtras) apply(cfg *agent.Config) {
	if x.instructions != nil {
		cfg.Instructions = *x.instructions
	}
	if x.tokens != nil {
		cfg.Limits.TotalTokens = agent.Limit(*x.tokens)
	}
}

var approveModes = []string{"ask", "wait", "defer", "all", "none"}

// loadSpec reads and strictly decodes a spec file.
func loadSpec(path string) (*specFile, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	dec := yaml.NewDecoder(bytes.NewReader(raw))
	dec.KnownFields(true)
	var s specFile
	if err := dec.Decode(&s); err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	var extra any
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return nil, errors.New("more than one YAML document")
	}
	return &s, s.validate()
}

// validate checks what the YAML types do not.
func (s *specFile) validate() error {
	if s.Approve != "" && !slices.Contains(approveModes, s.Approve) {
		return fmt.Errorf("approve: %q is not one of %s", s.Approve, strings.Join(approveModes, ", "))
	}
	for _, name := range s.Tools {
		if err := tool.ValidateName(name); err != nil {
			return fmt.Errorf("tools: %w", err)
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

// applySpec reads --spec, if given, into f: a flag set on the command line
// wins over the spec.
func applySpec(fl *pflag.FlagSet, f *runFlags) error {
	if f.spec == "" {
		return nil
	}
	s, err := loadSpec(f.spec)
	if err != nil {
		return usageErr("--spec %s: %v", f.spec, err)
	}
	set := func(flag string, apply func()) {
		if !fl.Changed(flag) {
			apply()
		}
	}
	if s.Model != "" {
		set("model", func() { f.model = s.Model })
	}
	if s.Tools != nil {
		set("tools", func() { f.tools = strings.Join(s.Tools, ",") })
	}
	if s.Approve != "" {
		set("approve", func() { f.approve = s.Approve })
	}
	f.extras.instructions = s.Instructions
	if l := s.Limits; l != nil {
		if l.Requests != nil {
			set("request-limit", func() { f.requestLimit = *l.Requests })
		}
		if l.ToolCalls != nil {
			set("tool-calls-limit", func() { f.toolCallsLimit = *l.ToolCalls })
		}
		f.extras.tokens = l.Tokens
	}
	if ms := s.ModelSettings; ms != nil {
		mf := &f.mf
		if ms.Stream != nil {
			set("stream", func() { mf.stream = *ms.Stream })
		}
		if ms.IdleTimeout != nil {
			d, _ := time.ParseDuration(*ms.IdleTimeout) // validated
			set("model-idle-timeout", func() { mf.idleTimeout = d })
		}
		if ms.Retries != nil {
			set("model-retries", func() { mf.retries = *ms.Retries })
		}
		if ms.StreamUsage != nil {
			mf.streamUsage = ms.StreamUsage
		}
		if ms.MaxTokens != nil {
			mf.maxTokens = *ms.MaxTokens
		}
		mf.temperature, mf.parallelToolCalls, mf.extraBody = ms.Temperature, ms.ParallelToolCalls, ms.ExtraBody
	}
	for i, c := range s.Capabilities {
		var v any
		if c.BackgroundTools.Tools.Kind != 0 {
			if err := c.BackgroundTools.Tools.Decode(&v); err != nil {
				return usageErr("--spec %s: capabilities[%d].BackgroundTools.tools: %v", f.spec, i, err)
			}
		}
		sel, err := agent.SelectorFromSpec(v)
		if err != nil {
			return usageErr("--spec %s: capabilities[%d]: %v", f.spec, i, err)
		}
		f.extras.background = append(f.extras.background, sel)
	}
	for _, t := range s.ExternalTools {
		var params json.RawMessage
		if t.Parameters != nil {
			params, _ = json.Marshal(t.Parameters) // validated
		}
		f.extras.external = append(f.extras.external, tool.Def{Name: t.Name, Description: t.Description, Parameters: params, Metadata: t.Metadata})
	}
	return nil
}
