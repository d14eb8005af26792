package protocol

import "strconv"

// The Nats-Msg-Id of every message the runtime publishes to be stored once
// (SPEC §5.2): the server drops a message whose ID it stored within the
// stream's duplicate window, so each ID names what must be stored once.
// Every publisher builds them here. Cancels and progress reports carry
// none.

// TaskMsgID is the Nats-Msg-Id of a task's dispatch: the task ID for the
// first attempt, "<task ID>:<attempt>" for a later one, so that the
// server drops duplicates of one dispatch but not a dispatch again.
func TaskMsgID(task string, attempt int) string {
	if attempt <= 0 {
		return task
	}
	return task + ":" + strconv.Itoa(attempt)
}

// IdempotencyKeyHeader is the task header that carries the attempt's
// idempotency key, [IdempotencyKey] (SPEC §13): the dispatcher sets it on
// every task it publishes.
const IdempotencyKeyHeader = "Offload-Idempotency-Key"

// IdempotencyKey is the idempotency key of a task attempt,
// "<task ID>:<attempt>" (SPEC §13): the same on every delivery of that
// attempt, another for the next attempt, so that a tool can make its side
// effect happen once per attempt however often the attempt is delivered.
func IdempotencyKey(task string, attempt int) string {
	return task + ":" + strconv.Itoa(attempt)
}

// ResultMsgID is the Nats-Msg-Id of a worker's result, "res:<task ID>:<attempt>":
// results of redeliveries are dropped while a later attempt's is kept.
func ResultMsgID(task string, attempt int) string {
	return "res:" + task + ":" + strconv.Itoa(attempt)
}

// ApprovalMsgID is the Nats-Msg-Id of an approval's announcement,
// "approval:<task ID>": announcing a pause again stores nothing twice.
func ApprovalMsgID(task string) string { return "approval:" + task }

// ResolutionMsgID is the Nats-Msg-Id of an approval's resolution,
// "resolved:<task ID>".
func ResolutionMsgID(task string) string { return "resolved:" + task }

// DecisionMsgID is the Nats-Msg-Id of a decision published for task of
// conversation conv, "decision.<conv>.<task>": a decision published twice
// is stored once.
func DecisionMsgID(conv, task string) string { return "decision." + conv + "." + task }

// AnswerMsgID is the Nats-Msg-Id of an answer published for task of
// conversation conv, "answer.<conv>.<task>".
func AnswerMsgID(conv, task string) string { return "answer." + conv + "." + task }
