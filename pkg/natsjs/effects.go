package natsjs

import (
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/offload-dev/offload/pkg/protocol"
)

// The effect ledger (SPEC §13): for every task attempt a worker runs, an
// entry under [EffectKey] in the bucket <prefix>_effects, written with
// compare-and-set before the tool runs (Started) and completed once the
// attempt's result is stored (Finished). A worker that receives a delivery
// of an attempt with an entry knows that the attempt's tool ran, or may
// have, before.

// EffectKey returns the ledger key of a task attempt,
// <tool>.<task>.<attempt>: a worker of a tool reads and writes only the
// keys under its tool's name.
func EffectKey(toolName, task string, attempt int) string {
	return toolName + "." + task + "." + strconv.Itoa(attempt)
}

// Effect is the value of a ledger entry.
type Effect struct {
	// Started says which worker started the attempt's tool, and when.
	Started EffectStarted `json:"started"`
	// Finished, once set, says the attempt's result is stored.
	Finished *EffectFinished `json:"finished,omitempty"`
	// Resume, when set, is the state the running tool recorded
	// (tool.RunContext.Checkpoint): a delivery of the attempt after its
	// worker stopped resumes the tool with it instead of answering the
	// effect unknown (an MCP tool's {"server","mcp_task_id"}, SPEC §16).
	Resume json.RawMessage `json:"resume,omitempty"`
}

// EffectStarted is written before the tool runs.
type EffectStarted struct {
	// Worker is the ID of the worker that started the tool.
	Worker string `json:"worker"`
	// At is when it started it.
	At time.Time `json:"at"`
}

// EffectFinished is written after the attempt's result is stored.
type EffectFinished struct {
	// Status is the stored result's status.
	Status protocol.Status `json:"status"`
	// ResultSeq is the stored result's sequence in the results stream.
	ResultSeq uint64 `json:"result_seq"`
}

// ParseEffect decodes a ledger entry stored under key.
func ParseEffect(key string, data []byte) (Effect, error) {
	var e Effect
	if err := json.Unmarshal(data, &e); err != nil {
		return Effect{}, fmt.Errorf("natsjs: effect entry %s: %w", key, err)
	}
	if e.Started.Worker == "" {
		return Effect{}, fmt.Errorf("natsjs: effect entry %s: no started worker", key)
	}
	return e, nil
}
