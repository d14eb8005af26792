// Package limits is fleet control's vocabulary (SPEC §19) in plain Go:
// the limits of a tool's calls as a worker's config, a registry entry or
// an agent's spec gives them ([Limits], one struct every config embeds),
// how the limits of several sources combine for one call (the stricter
// wins: [Combine]), the key a call is limited by ([Call.Value]), and the
// state every worker replica shares for a tool ([State], stored as one
// value and updated with compare-and-set by natsjs): the calls that wait,
// the slots held, the rates' theoretical arrival times (GCRA), the
// cool-downs, the fairness passes (stride scheduling) and the pause, with
// the decisions taken on it (which waiting call runs next, whether a call
// may start now, how many wait ahead of one). It does no I/O: time is
// given to every decision.
package limits

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// Priorities of a call: 1 is the highest, 5 the lowest.
const (
	HighestPriority = 1
	DefaultPriority = 3
	LowestPriority  = 5
)

// The keys a limit may be held per besides a field path of the
// arguments.
const (
	KeyConversation = "conversation"
	KeyAgent        = "agent"
	KeyTenant       = "tenant"
	// ArgsPrefix starts a field path of the arguments ("args.customer.id");
	// a path that is not one of the three names above may leave it out.
	ArgsPrefix = "args."
)

// ErrInvalid is wrapped by every error of [Limits.Validate].
var ErrInvalid = errors.New("limits: invalid")

// Limits are the flow-control limits of a tool's calls (SPEC §19), as the
// `limits:` of a tool (or of an MCP server) in a worker's config, a
// registry entry and an agent's spec give them. Every field is optional;
// the zero value limits nothing. They hold across every worker replica
// and agent process; with Key they hold per key.
type Limits struct {
	// MaxInFlight bounds the calls running at once (per key with Key);
	// 0: unbounded.
	MaxInFlight int `yaml:"max_in_flight" json:"max_in_flight,omitempty"`
	// Rate bounds how often calls start (per key with Key), by the
	// generic cell rate algorithm.
	Rate *Rate `yaml:"rate" json:"rate,omitempty"`
	// Key, when set, holds MaxInFlight and Rate per key: conversation,
	// agent, tenant, or a field path of the arguments (args.customer.id,
	// or customer.id).
	Key string `yaml:"key" json:"key,omitempty"`
	// Priority is the calls' priority, 1 (highest) to 5 (lowest); 0:
	// [DefaultPriority]. A waiting call of a higher priority is dispatched
	// before any of a lower one.
	Priority int `yaml:"priority" json:"priority,omitempty"`
	// Fairness shares the tool between keys by weighted round-robin: one
	// key's backlog does not delay another's beyond its share.
	Fairness *Fairness `yaml:"fairness" json:"fairness,omitempty"`
}

// Rate is a limit on how often calls start: Limit calls per Period, with
// bursts of up to Burst calls at once (GCRA: a call may start when the
// theoretical arrival time is at most (Burst-1)×Period/Limit ahead).
type Rate struct {
	// Limit is how many calls per Period; at least 1.
	Limit int `yaml:"limit" json:"limit"`
	// Period is a positive duration ("1m").
	Period Duration `yaml:"period" json:"period"`
	// Burst is how many calls may start at once; 0 means 1.
	Burst int `yaml:"burst" json:"burst,omitempty"`
}

// Fairness shares a tool between the values of Key (weighted round-robin
// by stride scheduling): a key of weight 2 is given twice the share of a
// key of weight 1 while both have calls waiting.
type Fairness struct {
	// Key is what calls are shared by: conversation, agent, tenant or a
	// field path of the arguments.
	Key string `yaml:"key" json:"key"`
	// Weights are the weights of some keys' values; every other value
	// weighs 1.
	Weights map[string]float64 `yaml:"weights" json:"weights,omitempty"`
}

// Duration is a time.Duration written in YAML and JSON as a Go duration
// string ("90s", "1m", "1h30m").
type Duration time.Duration

// UnmarshalYAML implements yaml.Unmarshaler.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	var s string
	if err := n.Decode(&s); err != nil {
		return fmt.Errorf("line %d: a duration such as \"1m\" or \"10s\"", n.Line)
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("line %d: %q is no duration such as \"1m\" or \"10s\"", n.Line, s)
	}
	*d = Duration(v)
	return nil
}

// MarshalYAML implements yaml.Marshaler.
func (d Duration) MarshalYAML() (any, error) { return d.String(), nil }

// MarshalJSON implements json.Marshaler: a Go duration string.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(d.String()) }

// UnmarshalJSON implements json.Unmarshaler: a Go duration string.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("a duration is a string such as \"1m\": %w", err)
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return err
	}
	*d = Duration(v)
	return nil
}

// String returns the duration in Go syntax ("1m0s").
func (d Duration) String() string { return time.Duration(d).String() }

// Empty reports whether l limits nothing (nil, or every field unset).
func (l *Limits) Empty() bool {
	return l == nil || l.MaxInFlight == 0 && l.Rate == nil && l.Priority == 0 && l.Fairness == nil
}

// Validate checks l; every error wraps [ErrInvalid] and names the field.
// A nil l is valid.
func (l *Limits) Validate() error {
	if l == nil {
		return nil
	}
	if l.MaxInFlight < 0 {
		return fmt.Errorf("%w: max_in_flight %d: want 0 (unbounded) or more", ErrInvalid, l.MaxInFlight)
	}
	if r := l.Rate; r != nil {
		if r.Limit < 1 {
			return fmt.Errorf("%w: rate.limit %d: want at least 1", ErrInvalid, r.Limit)
		}
		if r.Period <= 0 {
			return fmt.Errorf("%w: rate.period %s: want a positive duration such as 1m", ErrInvalid, r.Period)
		}
		if r.Burst < 0 {
			return fmt.Errorf("%w: rate.burst %d: want at least 1", ErrInvalid, r.Burst)
		}
		if r.Interval() <= 0 {
			return fmt.Errorf("%w: rate %d per %s: more than one call per nanosecond", ErrInvalid, r.Limit, r.Period)
		}
	}
	if l.Key != "" {
		if err := validKey(l.Key); err != nil {
			return fmt.Errorf("%w: key: %w", ErrInvalid, err)
		}
	}
	if l.Priority != 0 && (l.Priority < HighestPriority || l.Priority > LowestPriority) {
		return fmt.Errorf("%w: priority %d: want 1 (highest) to 5 (lowest)", ErrInvalid, l.Priority)
	}
	if f := l.Fairness; f != nil {
		if f.Key == "" {
			return fmt.Errorf("%w: fairness.key: required (tenant, agent, conversation or a field path of the arguments)", ErrInvalid)
		}
		if err := validKey(f.Key); err != nil {
			return fmt.Errorf("%w: fairness.key: %w", ErrInvalid, err)
		}
		for k, w := range f.Weights {
			if !(w > 0) || math.IsInf(w, 0) {
				return fmt.Errorf("%w: fairness.weights[%q] %v: want a positive number", ErrInvalid, k, w)
			}
		}
	}
	return nil
}

// validKey checks a key: one of the names, or a dotted field path.
func validKey(k string) error {
	switch k {
	case KeyConversation, KeyAgent, KeyTenant:
		return nil
	}
	path := strings.TrimPrefix(k, ArgsPrefix)
	if path == "" {
		return fmt.Errorf("%q names no field", k)
	}
	for _, part := range strings.Split(path, ".") {
		if part == "" {
			return fmt.Errorf("%q: an empty field name (want conversation, agent, tenant or a field path such as args.customer.id)", k)
		}
	}
	return nil
}

// Interval is the GCRA emission interval: Period/Limit.
func (r *Rate) Interval() time.Duration {
	if r == nil || r.Limit <= 0 {
		return 0
	}
	return time.Duration(r.Period) / time.Duration(r.Limit)
}

// burst is Burst, 1 when unset.
func (r *Rate) burst() int {
	if r.Burst <= 0 {
		return 1
	}
	return r.Burst
}

// PriorityOf returns l's priority, [DefaultPriority] when unset.
func (l *Limits) PriorityOf() int {
	if l == nil || l.Priority == 0 {
		return DefaultPriority
	}
	return l.Priority
}

// String describes l in a line ("max_in_flight 2 per tenant, rate 30/1m0s
// burst 1, priority 3").
func (l *Limits) String() string {
	if l.Empty() {
		return "none"
	}
	var parts []string
	per := ""
	if l.Key != "" {
		per = " per " + l.Key
	}
	if l.MaxInFlight > 0 {
		parts = append(parts, fmt.Sprintf("max_in_flight %d%s", l.MaxInFlight, per))
	}
	if r := l.Rate; r != nil {
		parts = append(parts, fmt.Sprintf("rate %d/%s burst %d%s", r.Limit, r.Period, r.burst(), per))
	}
	if l.Priority != 0 {
		parts = append(parts, fmt.Sprintf("priority %d", l.Priority))
	}
	if f := l.Fairness; f != nil {
		parts = append(parts, "fairness by "+f.Key)
	}
	return strings.Join(parts, ", ")
}
