package builtin

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/google/jsonschema-go/jsonschema"

	"github.com/offload-dev/offload/internal/proc"
	"github.com/offload-dev/offload/pkg/tool"
)

// Names of the built-in tools.
const (
	NameHTTPFetch = "http_fetch"
	NameReadFile  = "read_file"
	NameListDir   = "list_dir"
	NameWriteFile = "write_file"
	NameShell     = "shell"
	NameSleep     = "sleep"
)

// Limits and defaults.
const (
	// DefaultHTTPMaxBytes is the default body size limit of http_fetch.
	DefaultHTTPMaxBytes = 1 << 20
	// DefaultHTTPTimeout is the default time limit of an http_fetch call.
	DefaultHTTPTimeout = 30 * time.Second
	// DefaultShellTimeout is the timeout of a shell call that sets none.
	DefaultShellTimeout = time.Minute
	// DefaultShellMaxTimeout caps the timeout a shell call may ask for.
	DefaultShellMaxTimeout = 10 * time.Minute
	// MaxShellOutputBytes is how much of stdout and of stderr shell returns.
	MaxShellOutputBytes = 64 << 10
	// MaxFileBytes is the largest file read_file reads and write_file
	// writes: 1000 KiB, which leaves room in a 1 MiB message for the
	// result's envelope. A file within it whose content takes more than
	// protocol.MaxContentBytes once JSON-encoded (escaped characters) is
	// refused too.
	MaxFileBytes = 1000 << 10
	// MaxDirEntries is the most entries list_dir returns.
	MaxDirEntries = 1000
	// MaxSleepSeconds is the longest sleep.
	MaxSleepSeconds = 3600
	// SleepTimeout is sleep's timeout (its registry entry's): the longest
	// sleep and a minute.
	SleepTimeout = MaxSleepSeconds*time.Second + time.Minute
	// FileTimeout is the timeout of read_file, list_dir and write_file.
	FileTimeout = time.Minute
)

// Config configures the built-in tools. The zero value is usable.
type Config struct {
	// Root is the directory the file tools are confined to and shell runs
	// in. Defaults to ".". It must exist.
	Root string
	// AllowPrivateNetwork lets http_fetch reach loopback, private,
	// link-local, unique-local, CGNAT, multicast and unspecified addresses
	// (--allow-private-network). DenyAddrs stay refused. Ignored when
	// HTTPAddrPolicy is set.
	AllowPrivateNetwork bool
	// HTTPAddrPolicy decides, at dial time, which addresses http_fetch may
	// connect to. Defaults to [PublicOnly], or [AnyAddr] with
	// AllowPrivateNetwork.
	HTTPAddrPolicy AddrPolicy
	// HTTPLookup resolves host names for http_fetch. Defaults to
	// net.DefaultResolver.LookupNetIP.
	HTTPLookup Lookup
	// DenyAddrs are addresses http_fetch never reaches, whatever the policy
	// (the NATS server's port: the embedded server, or the worker's). A
	// loopback or unspecified entry covers every loopback and unspecified
	// address with its port.
	DenyAddrs []netip.AddrPort
	// DenyPaths are directories (or files) the file tools refuse, wherever
	// Root is: the agent's store, which holds the NATS credentials, and
	// credential files. Symbolic links are resolved before the check.
	DenyPaths []string
	// HTTPMaxBytes limits the body http_fetch returns; longer bodies are
	// truncated with a marker. Defaults to [DefaultHTTPMaxBytes].
	HTTPMaxBytes int64
	// HTTPTimeout limits an http_fetch call, body included. Defaults to
	// [DefaultHTTPTimeout].
	HTTPTimeout time.Duration
	// ShellTimeout is the timeout of a shell call that sets none. Defaults
	// to [DefaultShellTimeout].
	ShellTimeout time.Duration
	// ShellMaxTimeout caps the timeout a shell call may ask for, and
	// ShellTimeout. Defaults to [DefaultShellMaxTimeout] (or ShellTimeout, if
	// larger).
	ShellMaxTimeout time.Duration
	// Getenv reads the process environment that shell's minimal
	// environment (PATH, HOME, LANG, TZ and ShellEnv) is taken from.
	// Defaults to os.Getenv.
	Getenv func(string) string
	// ShellEnv names further environment variables passed through to shell
	// commands (default none).
	ShellEnv []string
	// Reaper, when set, kills every descendant of a shell command when it
	// ends, also those that left its process group (setsid, a double
	// fork). Without one only the process group is killed.
	Reaper *proc.Reaper
	// ToolUser names the user shell commands run as when the process is
	// root: a user name or numeric ID, run with every privilege dropped so
	// that the commands cannot read the process's environment or memory
	// (proc.ToolUser, proc.User.Start). Empty, or a user of ID 0: they run
	// as the process's own user, as they always do when the process is not
	// root. toolworker and agent give --tool-user (default nobody). The
	// file tools run in the process itself, as its user.
	ToolUser string
	// SleepProgressInterval is how often sleep reports progress. Defaults to
	// one second.
	SleepProgressInterval time.Duration
	// Logger records shell commands and file writes (an audit trail).
	// Defaults to discarding.
	Logger *slog.Logger

	// user is ToolUser's, once looked up (nil: none applies).
	user *proc.User
}

func (c Config) withDefaults() (Config, error) {
	if c.Root == "" {
		c.Root = "."
	}
	abs, err := filepath.Abs(c.Root)
	if err != nil {
		return c, fmt.Errorf("builtin: root: %w", err)
	}
	fi, err := os.Stat(abs)
	if err != nil {
		return c, fmt.Errorf("builtin: root: %w", err)
	}
	if !fi.IsDir() {
		return c, fmt.Errorf("builtin: root %s is not a directory", abs)
	}
	c.Root = abs
	if c.user, err = proc.ToolUser(c.ToolUser); err != nil {
		return c, fmt.Errorf("builtin: tool user: %w", err)
	}
	deny := make([]string, 0, len(c.DenyPaths))
	for _, p := range c.DenyPaths {
		abs, err := filepath.Abs(p)
		if err != nil {
			return c, fmt.Errorf("builtin: deny path: %w", err)
		}
		deny = append(deny, realPath(abs))
	}
	c.DenyPaths = deny
	if c.HTTPAddrPolicy == nil {
		c.HTTPAddrPolicy = PublicOnly
		if c.AllowPrivateNetwork {
			c.HTTPAddrPolicy = AnyAddr
		}
	}
	if c.HTTPLookup == nil {
		c.HTTPLookup = func(ctx context.Context, host string) ([]netip.Addr, error) {
			return net.DefaultResolver.LookupNetIP(ctx, "ip", host)
		}
	}
	if c.HTTPMaxBytes <= 0 {
		c.HTTPMaxBytes = DefaultHTTPMaxBytes
	}
	if c.HTTPTimeout <= 0 {
		c.HTTPTimeout = DefaultHTTPTimeout
	}
	if c.ShellTimeout <= 0 {
		c.ShellTimeout = DefaultShellTimeout
	}
	if c.ShellMaxTimeout <= 0 {
		c.ShellMaxTimeout = max(DefaultShellMaxTimeout, c.ShellTimeout)
	}
	c.ShellTimeout = min(c.ShellTimeout, c.ShellMaxTimeout)
	if c.Getenv == nil {
		c.Getenv = os.Getenv
	}
	if c.SleepProgressInterval <= 0 {
		c.SleepProgressInterval = time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c, nil
}

// Names returns the names of the built-in tools, in the order [Tools]
// returns them.
func Names() []string {
	return []string{NameHTTPFetch, NameReadFile, NameListDir, NameWriteFile, NameShell, NameSleep}
}

// Tools builds the built-in tools, in the order of [Names]. It fails when
// Config.Root is not a directory and when Config.ToolUser is not a user.
func Tools(cfg Config) ([]*tool.Tool, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	files := &files{root: cfg.Root, deny: cfg.DenyPaths, log: cfg.Logger}
	builders := []func() (*tool.Tool, error){
		func() (*tool.Tool, error) { return httpFetchTool(cfg) },
		files.readTool,
		files.listTool,
		files.writeTool,
		func() (*tool.Tool, error) { return shellTool(cfg) },
		func() (*tool.Tool, error) { return sleepTool(cfg) },
	}
	out := make([]*tool.Tool, 0, len(builders))
	for _, b := range builders {
		t, err := b()
		if err != nil {
			return nil, err
		}
		out = append(out, t)
	}
	return out, nil
}

// constrain returns t with its schema edited by edit (the inferred schema
// cannot express bounds or enums).
func constrain(t *tool.Tool, edit func(props map[string]*jsonschema.Schema)) (*tool.Tool, error) {
	var s jsonschema.Schema
	if err := json.Unmarshal(t.Parameters, &s); err != nil {
		return nil, fmt.Errorf("builtin: %s: %w", t.Name, err)
	}
	edit(s.Properties)
	b, err := json.Marshal(&s)
	if err != nil {
		return nil, fmt.Errorf("builtin: %s: %w", t.Name, err)
	}
	return t.WithParameters(b)
}

// ctxErr returns the error to report when ctx ended the call.
func ctxErr(ctx context.Context, name string) error {
	return fmt.Errorf("builtin: %s: %w", name, context.Cause(ctx))
}

func fail(format string, args ...any) error { return tool.Fail(fmt.Sprintf(format, args...)) }

// size formats a byte count for a tool description ("1 MiB", "64 KiB").
func size(n int64) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	default:
		return fmt.Sprintf("%d bytes", n)
	}
}

// Named returns the built-in tools of names (all when names is empty),
// built with cfg, in the order of [Names]. Names that are not built-in are
// ignored: check them with tool.CheckOffered against [Names]. It fails as
// [Tools] does, and as [CheckUser] does for the tools returned.
func Named(cfg Config, names []string) ([]*tool.Tool, error) {
	all, err := named(cfg, names)
	if err != nil {
		return nil, err
	}
	return all, CheckUser(cfg, toolNames(all))
}

func named(cfg Config, names []string) ([]*tool.Tool, error) {
	all, err := Tools(cfg)
	if err != nil || len(names) == 0 {
		return all, err
	}
	return slices.DeleteFunc(all, func(t *tool.Tool) bool { return !slices.Contains(names, t.Name) }), nil
}

// Offered builds the built-in tools an agent offers: those of names, or
// with none named every one but shell, which runs anything as the
// process's user (or, under root, the tool user), next to its credentials
// and the model's API key, and is offered only when named (SPEC §9). It
// fails as [Named] does.
func Offered(cfg Config, names []string) ([]*tool.Tool, error) {
	all, err := named(cfg, names)
	if err != nil {
		return nil, err
	}
	if len(names) == 0 {
		all = slices.DeleteFunc(all, func(t *tool.Tool) bool { return t.Name == NameShell })
	}
	return all, CheckUser(cfg, toolNames(all))
}

// CheckUser checks that the tool user of cfg (Config.ToolUser, when the
// process is root) can do the work of the tools of names that run as it:
// shell must be able to enter Root, its working directory. The error
// wraps proc.ErrNoAccess. It checks nothing when no tool user applies.
func CheckUser(cfg Config, names []string) error {
	if !slices.Contains(names, NameShell) {
		return nil
	}
	cfg, err := cfg.withDefaults()
	if err != nil {
		return err
	}
	if err := cfg.user.CheckDir(cfg.Root, false); err != nil {
		return fmt.Errorf("builtin: %s: root: %w", NameShell, err)
	}
	return nil
}

// toolNames returns the names of tools.
func toolNames(tools []*tool.Tool) []string {
	names := make([]string, len(tools))
	for i, t := range tools {
		names[i] = t.Name
	}
	return names
}
