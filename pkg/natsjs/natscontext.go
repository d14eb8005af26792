package natsjs

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// NATSContext is the part of a `nats` CLI context (`nats context save`) the
// binaries use: the server URLs and the credentials.
type NATSContext struct {
	// Name is the context's name.
	Name string `json:"-"`
	// URL is the comma-separated server list.
	URL string `json:"url"`
	// User and Password authenticate by user and password.
	User     string `json:"user"`
	Password string `json:"password"`
	// Token authenticates by token.
	Token string `json:"token"`
	// Creds is a credentials file (JWT and nkey seed).
	Creds string `json:"creds"`
	// Nkey is an nkey seed file.
	Nkey string `json:"nkey"`
	// Cert, Key and CA are TLS files.
	Cert string `json:"cert"`
	Key  string `json:"key"`
	CA   string `json:"ca"`
	// InboxPrefix is the prefix of reply subjects (permissions often allow
	// only one).
	InboxPrefix string `json:"inbox_prefix"`
}

// contextDir returns the directory of the `nats` CLI's contexts:
// $XDG_CONFIG_HOME/nats/context, or ~/.config/nats/context.
func contextDir(getenv func(string) string) (string, error) {
	if x := getenv("XDG_CONFIG_HOME"); x != "" {
		return filepath.Join(x, "nats", "context"), nil
	}
	home := getenv("HOME")
	if home == "" {
		h, err := os.UserHomeDir()
		if err != nil {
			return "", fmt.Errorf("natsjs: nats context directory: %w", err)
		}
		home = h
	}
	return filepath.Join(home, ".config", "nats", "context"), nil
}

// LoadContext reads the `nats` CLI context name: a name saved with
// `nats context save` (looked up in
// $XDG_CONFIG_HOME/nats/context, or ~/.config/nats/context), or the path of a
// context's JSON file. getenv defaults to os.Getenv.
func LoadContext(name string, getenv func(string) string) (NATSContext, error) {
	if getenv == nil {
		getenv = os.Getenv
	}
	path := name
	if !strings.ContainsRune(name, filepath.Separator) && !strings.HasSuffix(name, ".json") {
		if strings.ContainsAny(name, "./\\") || name == "" {
			return NATSContext{}, fmt.Errorf("%w: invalid name %q", ErrNoContext, name)
		}
		dir, err := contextDir(getenv)
		if err != nil {
			return NATSContext{}, err
		}
		path = filepath.Join(dir, name+".json")
	}
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return NATSContext{}, fmt.Errorf("%w: %s (%s)", ErrNoContext, name, path)
	}
	if err != nil {
		return NATSContext{}, fmt.Errorf("natsjs: nats context %s: %w", name, err)
	}
	var c NATSContext
	if err := json.Unmarshal(data, &c); err != nil {
		return NATSContext{}, fmt.Errorf("natsjs: nats context %s: %w", name, err)
	}
	c.Name = name
	return c, nil
}
