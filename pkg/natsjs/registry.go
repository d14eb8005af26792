package natsjs

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/offload-dev/offload/pkg/limits"
	"github.com/offload-dev/offload/pkg/tool"
)

// RegistryTTL is how long a registry entry stays valid after it was
// written: the registry bucket's max age (SPEC §5.4). Workers refresh their
// entries well before (every worker.Config.RegistryRefresh, natsjs/worker).
const RegistryTTL = 30 * time.Second

// RegistryEntry is the value of a registry key <tool>.<worker-id>
// (SPEC §5.4): the definition of a tool as one worker serves it.
type RegistryEntry struct {
	// Name is the tool's name.
	Name string `json:"name"`
	// Description is shown to the model.
	Description string `json:"description"`
	// Parameters is the JSON Schema of the arguments.
	Parameters json.RawMessage `json:"parameters"`
	// Metadata is the tool's metadata (e.g. "background": true).
	Metadata map[string]any `json:"metadata"`
	// RequiresApproval defers every call for a person's approval.
	RequiresApproval bool `json:"requires_approval"`
	// Idempotent says the worker runs a call's attempt again after the
	// worker that started it stopped (SPEC §13); optional, false when
	// absent.
	Idempotent bool `json:"idempotent,omitempty"`
	// Retries is the tool's retry budget (an optional field beyond
	// SPEC §5.4's list: absent, the agent's default applies).
	Retries *int `json:"retries,omitempty"`
	// Timeout is the tool's timeout in seconds (> 0; optional): how long
	// one call may take on the worker. The agent bounds each background
	// call by it (SPEC §20); absent, by its own default.
	Timeout float64 `json:"timeout,omitempty"`
	// Limits are the limits the worker holds the tool's calls to (SPEC
	// §19), optional: what `agent tools` shows and the agents' limits
	// combine with.
	Limits *limits.Limits `json:"limits,omitempty"`
	// Worker is the ID of the advertising worker.
	Worker string `json:"worker"`
	// ExpiresAt is when the entry stops being valid unless refreshed.
	ExpiresAt time.Time `json:"expires_at"`
}

// Def returns the tool definition carried by the entry.
func (e RegistryEntry) Def() tool.Def {
	return tool.Def{
		Name:             e.Name,
		Description:      e.Description,
		Parameters:       e.Parameters,
		Metadata:         tool.DeepCopy(e.Metadata),
		RequiresApproval: e.RequiresApproval,
		Idempotent:       e.Idempotent,
	}
}

// TimeoutDuration is the entry's timeout: zero when it states none (or
// one that is not positive), at most a year.
func (e RegistryEntry) TimeoutDuration() time.Duration {
	switch {
	case !(e.Timeout > 0):
		return 0
	case e.Timeout >= maxTimeout.Seconds():
		return maxTimeout
	}
	return time.Duration(e.Timeout * float64(time.Second))
}

// maxTimeout is the longest timeout an entry may state: a year.
const maxTimeout = 365 * 24 * time.Hour

// NewRegistryEntry returns the registry entry of t served by worker, valid
// until expires: what a worker writes under [RegistryKey].
func NewRegistryEntry(t *tool.Tool, worker string, expires time.Time) RegistryEntry {
	d := t.Def()
	params := d.Parameters
	if len(params) == 0 {
		params = json.RawMessage(`{"type":"object","properties":{}}`)
	}
	return RegistryEntry{
		Name:             d.Name,
		Description:      d.Description,
		Parameters:       params,
		Metadata:         d.Metadata,
		RequiresApproval: d.RequiresApproval,
		Idempotent:       d.Idempotent,
		Retries:          &t.Retries,
		Timeout:          t.Timeout.Seconds(),
		Limits:           t.Limits,
		Worker:           worker,
		ExpiresAt:        expires.UTC(),
	}
}

// RegistryKey returns the registry key of a tool served by a worker,
// <tool>.<worker-id>, with every character of the worker ID that is not
// allowed in a single KV key token replaced by '_'.
func RegistryKey(toolName, workerID string) string {
	return toolName + "." + keyToken(workerID)
}

// keyToken makes s usable as one KV key token: [-_=a-zA-Z0-9]+.
func keyToken(s string) string {
	if s == "" {
		return "_"
	}
	var b strings.Builder
	for _, r := range s {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '_', r == '=':
			b.WriteRune(r)
		default:
			b.WriteByte('_')
		}
	}
	return b.String()
}

// ParseRegistryEntry decodes a registry value stored under key, checking
// that it names the key's tool and that the name is valid.
func ParseRegistryEntry(key string, data []byte) (RegistryEntry, error) {
	var e RegistryEntry
	if err := json.Unmarshal(data, &e); err != nil {
		return RegistryEntry{}, fmt.Errorf("natsjs: registry entry %s: %w", key, err)
	}
	name, _, _ := strings.Cut(key, ".")
	if e.Name != name {
		return RegistryEntry{}, fmt.Errorf("natsjs: registry entry %s names tool %q", key, e.Name)
	}
	if err := tool.ValidateName(e.Name); err != nil {
		return RegistryEntry{}, fmt.Errorf("natsjs: registry entry %s: %w", key, err)
	}
	return e, nil
}
