package cmdtool

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/offload-dev/offload/pkg/limits"
	"github.com/offload-dev/offload/pkg/mcptool"
	"github.com/offload-dev/offload/pkg/tool"
)

// DefaultTimeout is the timeout of a command whose spec sets none.
const DefaultTimeout = time.Minute

// Output formats of a command's stdout.
const (
	// OutputText returns stdout as a string (the default).
	OutputText = "text"
	// OutputJSON parses stdout as JSON.
	OutputJSON = "json"
)

// ErrInvalidConfig is wrapped by every error about an ill-formed config:
// YAML syntax, unknown keys, and the validation rules of [Parse].
var ErrInvalidConfig = errors.New("cmdtool: invalid config")

// Config is a parsed --config file.
type Config struct {
	// Specs declares the command-backed tools, in file order (YAML key
	// "tools").
	Specs []Spec `yaml:"tools"`
	// MCPServers are the MCP servers whose tools the worker serves (YAML
	// key "mcp_servers", SPEC §16; pkg/mcptool).
	MCPServers []mcptool.ServerConfig `yaml:"mcp_servers"`

	// dir is the directory of the file the config was loaded from.
	dir string
}

// Spec declares one command-backed tool.
type Spec struct {
	// Name is the tool's name; it must match tool.NamePattern.
	Name string `yaml:"name"`
	// Description is shown to the model.
	Description string `yaml:"description"`
	// Command is the program and its arguments; not empty. A program with a
	// path separator is relative to the working directory, one without is
	// looked up in PATH.
	Command []string `yaml:"command"`
	// Timeout bounds one call. Defaults to [DefaultTimeout].
	Timeout Duration `yaml:"timeout"`
	// Parameters is the JSON Schema of the arguments; it must be an object
	// schema (type: object). Empty means no arguments.
	Parameters map[string]any `yaml:"parameters"`
	// Metadata is the tool's metadata ("background": true or "optional";
	// other keys pass through).
	Metadata map[string]any `yaml:"metadata"`
	// RequiresApproval makes every call wait for a person's approval.
	RequiresApproval bool `yaml:"requires_approval"`
	// Idempotent declares the command idempotent (SPEC §13): an attempt
	// whose worker stopped while running it is run again, with the same
	// OFFLOAD_IDEMPOTENCY_KEY, rather than left to a person.
	Idempotent bool `yaml:"idempotent"`
	// Output is how stdout is read: [OutputText] (the default) or
	// [OutputJSON].
	Output string `yaml:"output"`
	// Env names the environment variables passed through to the command,
	// on top of PATH, HOME, LANG and TZ (default none). Nothing else of the
	// worker's environment reaches the command.
	Env []string `yaml:"env"`
	// Limits are the tool's fleet control limits (SPEC §19): what every
	// worker replica serving it holds its calls to, carried in its
	// registry entry. Optional.
	Limits *limits.Limits `yaml:"limits"`

	// line is the spec's line in the YAML source, for error messages.
	line int
}

// envNameRE matches an environment variable name.
var envNameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// Duration is a time.Duration written in YAML as a Go duration string
// ("90s", "10m", "1h30m").
type Duration time.Duration

// UnmarshalYAML implements yaml.Unmarshaler. Durations must be positive.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	var s string
	if err := n.Decode(&s); err != nil {
		return fmt.Errorf("line %d: timeout must be a duration such as \"90s\" or \"10m\"", n.Line)
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("line %d: timeout %q: want a duration such as \"90s\" or \"10m\"", n.Line, s)
	}
	if v <= 0 {
		return fmt.Errorf("line %d: timeout %q must be positive", n.Line, s)
	}
	*d = Duration(v)
	return nil
}

// MarshalYAML implements yaml.Marshaler.
func (d Duration) MarshalYAML() (any, error) { return d.String(), nil }

// String returns the duration in Go syntax ("10m0s").
func (d Duration) String() string { return time.Duration(d).String() }

// Load reads and parses the config file at path (see [Parse]). Commands of
// the loaded config run, by default, in the directory of path.
func Load(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("cmdtool: load config: %w", err)
	}
	c, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("cmdtool: load config: %w", err)
	}
	c.dir = filepath.Dir(abs)
	return c, nil
}

// Parse parses and validates a config. Every error wraps [ErrInvalidConfig]
// and names the line it is about: YAML syntax errors, unknown keys, wrong
// value types, an invalid or duplicate tool name, an empty command, an
// output other than text or json, parameters that are not an object JSON
// Schema, metadata that is not JSON, and a config declaring no tools.
func Parse(data []byte) (*Config, error) {
	var c Config
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&c); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("%w: no tools declared", ErrInvalidConfig)
		}
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("%w: more than one YAML document", ErrInvalidConfig)
	}
	// A second pass records each spec's line for the messages below.
	var lines struct {
		Specs []yaml.Node `yaml:"tools"`
	}
	if err := yaml.Unmarshal(data, &lines); err == nil && len(lines.Specs) == len(c.Specs) {
		for i := range c.Specs {
			c.Specs[i].line = lines.Specs[i].Line
		}
	}
	if len(c.Specs) == 0 && len(c.MCPServers) == 0 {
		return nil, fmt.Errorf("%w: no tools declared", ErrInvalidConfig)
	}
	servers := map[string]bool{}
	for i := range c.MCPServers {
		m := &c.MCPServers[i]
		if err := m.Validate(); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
		}
		if servers[m.Name] {
			return nil, fmt.Errorf("%w: duplicate mcp server name %q", ErrInvalidConfig, m.Name)
		}
		servers[m.Name] = true
	}
	seen := map[string]int{}
	for i := range c.Specs {
		s := &c.Specs[i]
		if first, dup := seen[s.Name]; dup {
			return nil, s.errorf("duplicate tool name (first declared on line %d)", first)
		}
		seen[s.Name] = s.line
		if _, err := s.def(); err != nil {
			return nil, err
		}
	}
	return &c, nil
}

// Dir returns the directory of the file the config was loaded from
// (empty for one from [Parse]): the working directory of its commands and
// stdio MCP servers.
func (c *Config) Dir() string { return c.dir }

func (s *Spec) errorf(format string, args ...any) error {
	return fmt.Errorf("%w: line %d: tool %q: %s", ErrInvalidConfig, s.line, s.Name, fmt.Sprintf(format, args...))
}

// def validates the spec and returns its tool definition.
func (s *Spec) def() (tool.Def, error) {
	if err := tool.ValidateName(s.Name); err != nil {
		return tool.Def{}, s.errorf("%v", err)
	}
	if len(s.Command) == 0 || s.Command[0] == "" {
		return tool.Def{}, s.errorf("command is empty")
	}
	switch s.Output {
	case "", OutputText, OutputJSON:
	default:
		return tool.Def{}, s.errorf("output %q must be %q or %q", s.Output, OutputText, OutputJSON)
	}
	for _, name := range s.Env {
		if !envNameRE.MatchString(name) {
			return tool.Def{}, s.errorf("env: %q is not an environment variable name", name)
		}
	}
	if err := s.Limits.Validate(); err != nil {
		return tool.Def{}, s.errorf("%v", err)
	}
	var params json.RawMessage
	if s.Parameters != nil {
		if t, ok := s.Parameters["type"]; !ok || t != "object" {
			return tool.Def{}, s.errorf("parameters must be an object schema (type: object)")
		}
		b, err := json.Marshal(s.Parameters)
		if err != nil {
			return tool.Def{}, s.errorf("parameters are not JSON: %v", err)
		}
		params = b
	}
	if s.Metadata != nil {
		if _, err := json.Marshal(s.Metadata); err != nil {
			return tool.Def{}, s.errorf("metadata is not JSON: %v", err)
		}
	}
	def := tool.Def{
		Name:             s.Name,
		Description:      s.Description,
		Parameters:       params,
		Metadata:         s.Metadata,
		RequiresApproval: s.RequiresApproval,
		Idempotent:       s.Idempotent,
	}
	// Compile the schema now, so that a bad one is reported at load time.
	if _, err := tool.New(def, func(context.Context, *tool.RunContext, json.RawMessage) (any, error) { return nil, nil }); err != nil {
		return tool.Def{}, s.errorf("%v", err)
	}
	return def, nil
}

// timeout returns the spec's timeout or the default.
func (s *Spec) timeout() time.Duration {
	if s.Timeout <= 0 {
		return DefaultTimeout
	}
	return time.Duration(s.Timeout)
}
