package natsjs

import (
	"strings"

	"github.com/offload-dev/offload/pkg/protocol"
)

// The definitions are written for this prefix.
const (
	defPrefix       = protocol.DefaultPrefix
	defStreamPre    = "TOOLS_"
	defKVStreamPre  = "KV_tools_"
	defKVSubjPre    = "$KV.tools_"
	defOBJStreamPre = "OBJ_tools_"
	defOBJSubjPre   = "$O.tools_"
	toolholder      = "<tool>"
)

// Names are the names of a prefix's JetStream assets.
type Names struct {
	// Prefix is the subject prefix.
	Prefix string
	// Tasks is the stream of <prefix>.task.> (work queue).
	Tasks string
	// Results is the stream of <prefix>.result.>.
	Results string
	// Approvals is the stream of <prefix>.approval.>.
	Approvals string
	// Decisions is the stream of <prefix>.decision.>.
	Decisions string
	// Cancel is the stream of <prefix>.cancel.>.
	Cancel string
	// Answers is the stream of <prefix>.answer.>.
	Answers string
	// Expiries is the stream of <prefix>.expiry.>: the approval timeouts
	// the server schedules (SPEC §12), sourced by Decisions onto the
	// decision subjects.
	Expiries string
	// Wake is the stream of <prefix>.wake.>: the wake markers of `agent
	// serve` (a conversation suspended with nothing pending).
	Wake string
	// Events is the stream of <prefix>.event.>: the run events of `agent
	// serve`'s conversations, one subject per conversation.
	Events string
	// RegistryBucket is the tool registry KV bucket, <prefix>_registry.
	RegistryBucket string
	// RegistryStream is the registry's backing stream, KV_<prefix>_registry.
	RegistryStream string
	// ConversationsBucket is the conversation store's KV bucket,
	// <prefix>_conversations.
	ConversationsBucket string
	// ConversationsStream is its backing stream, KV_<prefix>_conversations.
	ConversationsStream string
	// HistoriesBucket is the object store of large histories,
	// <prefix>_histories.
	HistoriesBucket string
	// HistoriesStream is its backing stream, OBJ_<prefix>_histories.
	HistoriesStream string
	// PendingBucket is the KV bucket of the pending records,
	// <prefix>_pending: what people and UIs read of a conversation that
	// waits (conversation.Summary).
	PendingBucket string
	// PendingStream is its backing stream, KV_<prefix>_pending.
	PendingStream string
	// PendingIndex is the stream of <prefix>.pindex.>: the index of
	// pending calls, one message per call a pending record holds, which
	// the paged views read a page of (SPEC §21; natsjs/convstore).
	PendingIndex string
	// StatusIndex is the stream of <prefix>.sindex.>: the index of the
	// conversations' statuses, one message per conversation on
	// <prefix>.sindex.<conversation>.<status>, which the conversations
	// page reads a page of (SPEC §21; natsjs/convstore).
	StatusIndex string
	// EffectsBucket is the effect ledger's KV bucket, <prefix>_effects
	// (SPEC §13): key <tool>.<task>.<attempt>.
	EffectsBucket string
	// EffectsStream is its backing stream, KV_<prefix>_effects.
	EffectsStream string
	// ServiceBucket is the KV bucket of agent serve's own keys,
	// <prefix>_service (issue 37): its decision key pair (the public
	// half read by agents), its links' key and the links used; the roles'
	// permissions let the serve role alone read the rest.
	ServiceBucket string
	// ServiceStream is its backing stream, KV_<prefix>_service.
	ServiceStream string
	// LimitsBucket is fleet control's KV bucket, <prefix>_limits (SPEC
	// §19): key <tool>.state ([LimitsKey]) holds the tool's state shared
	// by every worker replica (limits.State).
	LimitsBucket string
	// LimitsStream is its backing stream, KV_<prefix>_limits.
	LimitsStream string
	// QueueBucket is the KV bucket of the calls held by a limit,
	// <prefix>_queue: key <tool>.<task>.<attempt> ([QueueKey]) holds the
	// task as it was delivered while it waits and runs from its queue.
	QueueBucket string
	// QueueStream is its backing stream, KV_<prefix>_queue.
	QueueStream string
	// Dead is the stream of <prefix>.dead.>: the dead letters, tasks whose
	// deliveries were exhausted.
	Dead string
	// Audit is the stream of <prefix>.audit.>: the operators' actions on
	// tools, each with who did it.
	Audit string
}

// NamesFor returns the asset names of prefix ("" means
// [protocol.DefaultPrefix]): stream names are the upper-cased prefix followed
// by _TASKS, _RESULTS, _APPROVALS, _DECISIONS, _CANCEL, _ANSWERS.
func NamesFor(prefix string) Names {
	if prefix == "" {
		prefix = defPrefix
	}
	up := strings.ToUpper(prefix) + "_"
	return Names{
		Prefix:         prefix,
		Tasks:          up + "TASKS",
		Results:        up + "RESULTS",
		Approvals:      up + "APPROVALS",
		Decisions:      up + "DECISIONS",
		Cancel:         up + "CANCEL",
		Answers:        up + "ANSWERS",
		Expiries:       up + "EXPIRIES",
		Wake:           up + "WAKE",
		Events:         up + "EVENTS",
		RegistryBucket: prefix + "_registry",
		RegistryStream: "KV_" + prefix + "_registry",

		ConversationsBucket: prefix + "_conversations",
		ConversationsStream: "KV_" + prefix + "_conversations",
		HistoriesBucket:     prefix + "_histories",
		HistoriesStream:     "OBJ_" + prefix + "_histories",
		PendingBucket:       prefix + "_pending",
		PendingStream:       "KV_" + prefix + "_pending",
		PendingIndex:        up + "PENDING_INDEX",
		StatusIndex:         up + "STATUS_INDEX",
		EffectsBucket:       prefix + "_effects",
		EffectsStream:       "KV_" + prefix + "_effects",
		ServiceBucket:       prefix + "_service",
		ServiceStream:       "KV_" + prefix + "_service",
		LimitsBucket:        prefix + "_limits",
		LimitsStream:        "KV_" + prefix + "_limits",
		QueueBucket:         prefix + "_queue",
		QueueStream:         "KV_" + prefix + "_queue",
		Dead:                up + "DEAD",
		Audit:               up + "AUDIT",
	}
}

// LimitsKey returns the key of a tool's fleet control state in the
// limits bucket, <tool>.state.
func LimitsKey(toolName string) string { return toolName + ".state" }

// QueueKey returns the key of a held call in the queue bucket,
// <tool>.<task>.<attempt>.
func QueueKey(toolName, task string, attempt int) string { return EffectKey(toolName, task, attempt) }

// AuditSubject returns the subject of the audit records of a tool,
// <prefix>.audit.<tool>.
func AuditSubject(prefix, toolName string) string {
	if prefix == "" {
		prefix = defPrefix
	}
	return prefix + ".audit." + toolName
}

// DecisionPublicKey is the key, in the service's bucket
// (Names.ServiceBucket), of the public half of agent serve's decision
// key: the one key of that bucket the agent role may read.
const DecisionPublicKey = "decisions.public"

// TaskConsumerName returns the durable name of a tool's task consumer,
// task_<tool>.
func TaskConsumerName(toolName string) string { return "task_" + toolName }
