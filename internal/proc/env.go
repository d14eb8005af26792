package proc

import (
	"slices"
	"strconv"
)

// BaseEnv are the environment variables every command gets from the
// process's environment, when set (SPEC §6.5).
var BaseEnv = []string{"PATH", "HOME", "LANG", "TZ"}

// Task names the task a command runs for. Its fields are given to the command
// as OFFLOAD_TASK_ID, OFFLOAD_CONVERSATION_ID, OFFLOAD_ATTEMPT and
// OFFLOAD_IDEMPOTENCY_KEY, so that it can make its side effects idempotent
// under at-least-once execution.
type Task struct {
	// ID is the task ID; empty when the call runs in-process (no task).
	ID string
	// ConversationID is the conversation's ID.
	ConversationID string
	// Attempt is the task's attempt.
	Attempt int
	// IdempotencyKey is the attempt's idempotency key, "<ID>:<Attempt>"
	// (SPEC §13); empty when the call runs in-process.
	IdempotencyKey string
}

// Environ returns a command's environment: the [BaseEnv] names and the
// names in pass that getenv reports non-empty, then the task's
// OFFLOAD_TASK_ID, OFFLOAD_CONVERSATION_ID, OFFLOAD_ATTEMPT and
// OFFLOAD_IDEMPOTENCY_KEY. Nothing else
// of the process's environment (API keys, NATS credentials) is passed.
func Environ(getenv func(string) string, pass []string, task Task) []string {
	var env []string
	seen := map[string]bool{}
	for _, name := range slices.Concat(BaseEnv, pass) {
		if seen[name] || name == "" {
			continue
		}
		seen[name] = true
		if v := getenv(name); v != "" {
			env = append(env, name+"="+v)
		}
	}
	return append(env,
		"OFFLOAD_TASK_ID="+task.ID,
		"OFFLOAD_CONVERSATION_ID="+task.ConversationID,
		"OFFLOAD_ATTEMPT="+strconv.Itoa(task.Attempt),
		"OFFLOAD_IDEMPOTENCY_KEY="+task.IdempotencyKey,
	)
}
