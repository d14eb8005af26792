package conversation

import "time"

// The statuses of a conversation in the status index (SPEC §11).
const (
	// StatusRunning: a run of it is live (or its holder died mid-run and
	// the lease has not lapsed yet).
	StatusRunning = "running"
	// StatusPaused: its last run paused on calls that wait for people.
	StatusPaused = "paused"
	// StatusFinished: its last run ended with the model's answer.
	StatusFinished = "finished"
	// StatusFailed: its last run ended with an error.
	StatusFailed = "failed"
)

// Statuses are the statuses, in the order of SPEC §11.
var Statuses = []string{StatusRunning, StatusPaused, StatusFinished, StatusFailed}

// Status is a conversation's entry in the status index, written by
// whoever holds its lease when a run starts and ends (session.Run: agent
// run, agent resume, agent serve): what GET /v1/conversations lists and
// offload_conversations counts without loading a history.
// natsjs/convstore keeps it beside the conversation.
type Status struct {
	// ConversationID is the conversation.
	ConversationID string `json:"conversation_id"`
	// Agent is the conversation's agent.
	Agent string `json:"agent,omitempty"`
	// Status is running, paused, finished or failed.
	Status string `json:"status"`
	// UpdatedAt is when the status was set.
	UpdatedAt time.Time `json:"updated_at"`
	// Error, for failed, says why the run failed (when its recorder said).
	Error string `json:"error,omitempty"`
	// StartedBy is who started the conversation (State.StartedBy).
	StartedBy string `json:"started_by,omitempty"`
}
