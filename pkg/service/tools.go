package service

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/offload-dev/offload/pkg/limits"
	"github.com/offload-dev/offload/pkg/protocol"
)

// Tools is the operator's hands on the fleet's tools (SPEC §19), which
// `agent tools` and the routes /v1/tools/… call (natsjs/toolctl implements
// it). Every action names who takes it (by), and is audited with it
// before it is taken.
type Tools interface {
	// List returns every tool a worker advertises or that has a fleet
	// control state, by name.
	List(ctx context.Context) ([]Tool, error)
	// Pause holds the new calls of a tool on every worker replica until
	// until (zero: until resumed); Resume ends it.
	Pause(ctx context.Context, tool string, until time.Time, by string) error
	Resume(ctx context.Context, tool, by string) error
	// DeadLetters returns the dead letters of a tool ("" every tool's).
	DeadLetters(ctx context.Context, tool string) ([]DeadLetter, error)
	// Replay runs a dead letter again as a new attempt of its task
	// (ErrNoDeadLetter for an unknown one); Discard deletes it.
	Replay(ctx context.Context, tool string, seq uint64, by string) (protocol.Task, error)
	Discard(ctx context.Context, tool string, seq uint64, by string) error
	// Cancel cancels the calls held in a tool's queue that f selects.
	Cancel(ctx context.Context, f ToolFilter, by string) ([]CancelledCall, error)
}

// The errors of [Tools], for the faces to branch on.
var (
	// ErrNoDeadLetter: no dead letter of that sequence and tool is kept.
	ErrNoDeadLetter = errors.New("toolctl: no such dead letter")
	// ErrNeedsTaskKey: the dead letter is an approved task authenticated
	// by the store's task key, which this process does not hold.
	ErrNeedsTaskKey = errors.New("toolctl: the dead letter is an authenticated approved task; replaying it needs the store's task key")
)

// Tool is one tool as [Tools.List] shows it.
type Tool struct {
	// Name is the tool's name.
	Name string `json:"name"`
	// Workers are the IDs of the workers that advertise it.
	Workers []string `json:"workers"`
	// Limits are its workers' limits (the first entry's).
	Limits *limits.Limits `json:"limits,omitempty"`
	// InFlight is how many calls hold a slot of its limits.
	InFlight int `json:"in_flight"`
	// Queued is how many calls wait in its queue (held by a limit, a
	// cool-down or the pause); Undelivered how many tasks its workers have
	// not been delivered yet (0 for a user that may not read its task
	// consumer's info: agent serve's).
	Queued      int `json:"queued"`
	Undelivered int `json:"undelivered"`
	// CoolDownUntil, when set, is the end of its cool-down (an upstream's
	// retry_after), CoolDownKey its key ("" the tool's).
	CoolDownUntil time.Time `json:"cool_down_until,omitzero"`
	CoolDownKey   string    `json:"cool_down_key,omitempty"`
	// Paused is the operator's pause, when in force.
	Paused *limits.Pause `json:"paused,omitempty"`
	// DeadLetters is how many of its dead letters are kept.
	DeadLetters int `json:"dead_letters"`
}

// DeadLetter is a call whose deliveries were exhausted, kept by its
// worker as it was delivered (SPEC §19).
type DeadLetter struct {
	// Seq is its sequence in the dead letters' stream: what replay and
	// discard name.
	Seq uint64 `json:"seq"`
	// Tool, Conversation, Task and Attempt are the call's.
	Tool         string `json:"tool"`
	Conversation string `json:"conversation"`
	Task         string `json:"task"`
	Attempt      int    `json:"attempt"`
	// Tenant and Agent are who made it, when the task said.
	Tenant string `json:"tenant,omitempty"`
	Agent  string `json:"agent,omitempty"`
	// Reason is why its deliveries ended (DeliveriesExhausted, or
	// RateLimited on its last); Worker the worker that kept it; Deliveries
	// how many it had.
	Reason     string `json:"reason"`
	Worker     string `json:"worker,omitempty"`
	Deliveries int    `json:"deliveries,omitempty"`
	// At is when it was kept.
	At time.Time `json:"at"`
}

// ToolFilter selects the calls held in a tool's queue that [Tools.Cancel]
// cancels: every one of Tool whose other fields, when set, match.
type ToolFilter struct {
	// Tool is the tool; required.
	Tool string `json:"tool"`
	// Agent and Tenant, when set, select the calls of that agent or
	// tenant.
	Agent  string `json:"agent,omitempty"`
	Tenant string `json:"tenant,omitempty"`
	// OlderThan, when set, selects the calls held for longer.
	OlderThan time.Duration `json:"older_than,omitempty"`
}

// String describes f ("agent a, tenant t, older than 5m0s").
func (f ToolFilter) String() string {
	var parts []string
	if f.Agent != "" {
		parts = append(parts, "agent "+f.Agent)
	}
	if f.Tenant != "" {
		parts = append(parts, "tenant "+f.Tenant)
	}
	if f.OlderThan > 0 {
		parts = append(parts, "older than "+f.OlderThan.String())
	}
	if len(parts) == 0 {
		return "every queued call"
	}
	return strings.Join(parts, ", ")
}

// CancelledCall is a call [Tools.Cancel] cancelled.
type CancelledCall struct {
	Conversation string `json:"conversation"`
	Task         string `json:"task"`
	Attempt      int    `json:"attempt"`
}
