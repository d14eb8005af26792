package telemetry

import "go.opentelemetry.io/otel/attribute"

// Attribute keys of the OpenTelemetry semantic conventions the spans use
// (GenAI and messaging), and offload's own.
const (
	GenAIOperationName      = attribute.Key("gen_ai.operation.name")
	GenAIRequestModel       = attribute.Key("gen_ai.request.model")
	GenAIResponseModel      = attribute.Key("gen_ai.response.model")
	GenAIUsageInputTokens   = attribute.Key("gen_ai.usage.input_tokens")
	GenAIUsageOutputTokens  = attribute.Key("gen_ai.usage.output_tokens")
	GenAIResponseFinish     = attribute.Key("gen_ai.response.finish_reasons")
	GenAIToolName           = attribute.Key("gen_ai.tool.name")
	GenAIToolCallID         = attribute.Key("gen_ai.tool.call.id")
	GenAIConversationID     = attribute.Key("gen_ai.conversation.id")
	MessagingSystem         = attribute.Key("messaging.system")
	MessagingDestination    = attribute.Key("messaging.destination.name")
	MessagingOperationType  = attribute.Key("messaging.operation.type")
	MessagingOperationName  = attribute.Key("messaging.operation.name")
	MessagingMessageID      = attribute.Key("messaging.message.id")
	MessagingConversationID = attribute.Key("messaging.message.conversation_id")
	ErrorType               = attribute.Key("error.type")

	// OffloadRunID is the run's ID, OffloadTaskID a task's,
	// OffloadTaskMode its mode (inline or background), OffloadAttempt its
	// attempt, OffloadWorker the worker's ID, OffloadStatus a result's
	// status.
	OffloadRunID    = attribute.Key("offload.run_id")
	OffloadTaskID   = attribute.Key("offload.task_id")
	OffloadTaskMode = attribute.Key("offload.task.mode")
	OffloadAttempt  = attribute.Key("offload.task.attempt")
	OffloadWorker   = attribute.Key("offload.worker")
	OffloadStatus   = attribute.Key("offload.result.status")

	// OffloadApprovalBy is who decided an approval (the decision's by),
	// OffloadApprovalOutcome how (approved, denied).
	OffloadApprovalBy      = attribute.Key("offload.approval.by")
	OffloadApprovalOutcome = attribute.Key("offload.approval.outcome")
	// OffloadDecisionChannel is the channel a decision was given through
	// (inbox, api, link, cli, nats, timeout).
	OffloadDecisionChannel = attribute.Key("offload.decision.channel")
	// OffloadLink says what a span link is (LinkContinues).
	OffloadLink = attribute.Key("offload.link")
)

// Values of offload.link: a run's link to the run it continues, an
// approval span's to the trace of the decision that ended it.
const (
	LinkContinues = "continues"
	LinkDecision  = "decision"
)

// GenAI operation names (gen_ai.operation.name).
const (
	OpInvokeAgent = "invoke_agent"
	OpChat        = "chat"
	OpExecuteTool = "execute_tool"
)

// MessagingSystemNATS is messaging.system of NATS.
const MessagingSystemNATS = "nats"
