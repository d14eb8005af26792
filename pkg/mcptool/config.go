package mcptool

import (
	"errors"
	"fmt"
	"net/url"
	"os"
	"regexp"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/offload-dev/offload/pkg/limits"
	"github.com/offload-dev/offload/pkg/tool"
)

// DefaultTimeout bounds one call of an MCP tool when neither the server
// nor an override sets a timeout.
const DefaultTimeout = time.Minute

// ErrInvalidConfig is wrapped by every error about an ill-formed MCP
// server entry.
var ErrInvalidConfig = errors.New("mcptool: invalid config")

// nameRE is what a server's name must match: it appears in metric labels,
// logs and registry metadata.
var nameRE = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// envNameRE matches an environment variable name.
var envNameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// refRE matches a ${NAME} reference in a header value.
var refRE = regexp.MustCompile(`\$\{([^}]*)\}`)

// ServerConfig is one entry of mcp_servers: in `toolworker --config`
// (SPEC §16; its YAML keys are the contract).
type ServerConfig struct {
	// Name names the server in logs, metrics and registry metadata
	// (mcp.server); [A-Za-z0-9_-]{1,64}.
	Name string `yaml:"name"`
	// Command starts a stdio server: the program and its arguments. A
	// program with a path separator is relative to the config's
	// directory, one without is looked up in PATH.
	Command []string `yaml:"command"`
	// URL reaches a streamable HTTP server instead (http or https).
	URL string `yaml:"url"`
	// Headers are sent with every HTTP request; ${NAME} in a value is
	// replaced by the worker's environment variable NAME, which must be
	// listed in Env.
	Headers map[string]string `yaml:"headers"`
	// Env names the worker's environment variables passed through to a
	// stdio server (on top of PATH, HOME, LANG and TZ), or usable in
	// Headers. Default none.
	Env []string `yaml:"env"`
	// Tools is the allow-list of MCP tool names served; default every
	// tool the server lists.
	Tools []string `yaml:"tools"`
	// Prefix is prepended to the MCP tool names to make the offload
	// tools' names.
	Prefix string `yaml:"prefix"`
	// Timeout bounds one call; default [DefaultTimeout].
	Timeout Duration `yaml:"timeout"`
	// Limits are the fleet control limits (SPEC §19) of each of the
	// server's tools: every tool holds its own calls to them, across
	// every worker replica serving it, and carries them in its registry
	// entry. An override's limits replace them for one tool. Optional.
	Limits *limits.Limits `yaml:"limits"`
	// Overrides change, per MCP tool name, what the server says of a tool.
	Overrides map[string]Override `yaml:"overrides"`
}

// Override changes what an MCP server says of one of its tools.
type Override struct {
	// RequiresApproval makes every call wait for a person's approval.
	RequiresApproval *bool `yaml:"requires_approval"`
	// Idempotent replaces what the annotations say (readOnlyHint or
	// idempotentHint true).
	Idempotent *bool `yaml:"idempotent"`
	// Background lets the model run the tool in the background
	// (metadata "background": true).
	Background *bool `yaml:"background"`
	// Timeout bounds one call of this tool.
	Timeout Duration `yaml:"timeout"`
	// Description replaces the server's description of the tool.
	Description string `yaml:"description"`
	// Limits replace the server's limits for this tool (SPEC §19).
	Limits *limits.Limits `yaml:"limits"`
}

// Duration is a time.Duration written in YAML as a Go duration string
// ("90s", "10m").
type Duration time.Duration

// UnmarshalYAML implements yaml.Unmarshaler. Durations must be positive.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	var s string
	if err := n.Decode(&s); err != nil {
		return fmt.Errorf("line %d: timeout must be a duration such as \"90s\" or \"10m\"", n.Line)
	}
	v, err := time.ParseDuration(s)
	if err != nil || v <= 0 {
		return fmt.Errorf("line %d: timeout %q: want a positive duration such as \"90s\" or \"10m\"", n.Line, s)
	}
	*d = Duration(v)
	return nil
}

// ParseShorthand parses the --mcp shorthand 'NAME=COMMAND ARGS…': a stdio
// server with the defaults. The command is split on white space.
func ParseShorthand(s string) (ServerConfig, error) {
	name, command, ok := strings.Cut(s, "=")
	if !ok {
		return ServerConfig{}, fmt.Errorf("%w: --mcp %q: want NAME=COMMAND ARGS…", ErrInvalidConfig, s)
	}
	c := ServerConfig{Name: strings.TrimSpace(name), Command: strings.Fields(command)}
	return c, c.Validate()
}

// Validate checks the entry: a valid name, exactly one of command and
// url, an http(s) URL, header references to listed variables, variable
// names, tool and override names, non-empty.
func (c *ServerConfig) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: mcp server %q: %s", ErrInvalidConfig, c.Name, fmt.Sprintf(format, args...))
	}
	if !nameRE.MatchString(c.Name) {
		return bad("name must match %s", nameRE)
	}
	switch {
	case len(c.Command) > 0 && c.URL != "":
		return bad("give command or url, not both")
	case len(c.Command) == 0 && c.URL == "":
		return bad("give command (a stdio server) or url (streamable HTTP)")
	case len(c.Command) > 0 && c.Command[0] == "":
		return bad("empty command")
	case len(c.Command) > 0 && len(c.Headers) > 0:
		return bad("headers are for an url server")
	}
	if c.URL != "" {
		u, err := url.Parse(c.URL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return bad("url %q: want an http or https URL", c.URL)
		}
	}
	for _, n := range c.Env {
		if !envNameRE.MatchString(n) {
			return bad("env %q is not a variable name", n)
		}
	}
	for k, v := range c.Headers {
		for _, m := range refRE.FindAllStringSubmatch(v, -1) {
			if !contains(c.Env, m[1]) {
				return bad("header %s uses ${%s}, which env: does not list", k, m[1])
			}
		}
	}
	if c.Prefix != "" && !regexp.MustCompile(`^[A-Za-z0-9_-]*$`).MatchString(c.Prefix) {
		return bad("prefix %q: letters, digits, _ and - only", c.Prefix)
	}
	for _, t := range c.Tools {
		if t == "" {
			return bad("empty name in tools")
		}
	}
	if err := c.Limits.Validate(); err != nil {
		return bad("limits: %v", err)
	}
	for name, o := range c.Overrides {
		if len(c.Tools) > 0 && !contains(c.Tools, name) {
			return bad("override of %q, which tools: does not list", name)
		}
		if err := o.Limits.Validate(); err != nil {
			return bad("overrides: %s: limits: %v", name, err)
		}
	}
	return nil
}

// limitsOf returns the limits of the MCP tool name: its override's, else
// the server's; nil for none.
func (c *ServerConfig) limitsOf(name string) *limits.Limits {
	if o, ok := c.Overrides[name]; ok && o.Limits != nil {
		return o.Limits
	}
	return c.Limits
}

// timeout is the per-call timeout of the MCP tool name.
func (c *ServerConfig) timeout(name string) time.Duration {
	if o, ok := c.Overrides[name]; ok && o.Timeout > 0 {
		return time.Duration(o.Timeout)
	}
	if c.Timeout > 0 {
		return time.Duration(c.Timeout)
	}
	return DefaultTimeout
}

// offloadName is the offload tool name of the MCP tool name, checked
// against tool.NamePattern with the fix named.
func (c *ServerConfig) offloadName(name string) (string, error) {
	full := c.Prefix + name
	if err := tool.ValidateName(full); err != nil {
		return "", fmt.Errorf("%w: mcp server %q: tool %q gives the offload name %q, outside [A-Za-z0-9_-]{1,64} (leave it out with tools, an allow-list, or change prefix)",
			ErrInvalidConfig, c.Name, name, full)
	}
	return full, nil
}

// headers returns the HTTP headers with their ${NAME}s replaced.
func (c *ServerConfig) headers(getenv func(string) string) map[string]string {
	if len(c.Headers) == 0 {
		return nil
	}
	out := make(map[string]string, len(c.Headers))
	for k, v := range c.Headers {
		out[k] = refRE.ReplaceAllStringFunc(v, func(ref string) string {
			return getenv(ref[2 : len(ref)-1])
		})
	}
	return out
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// getenvOr returns getenv, or os.Getenv when nil.
func getenvOr(getenv func(string) string) func(string) string {
	if getenv == nil {
		return os.Getenv
	}
	return getenv
}
