// Package tool defines the tools an agent offers to the model: their
// definition (name, description, JSON Schema, metadata, retry budget,
// approval and sequencing flags), the typed constructor [Func], toolsets,
// the [RunContext] a tool runs with, and the outcomes a tool returns as
// errors.
//
// # Outcomes
//
// A tool body returns a value (optionally wrapped in a [Return] to add
// content for the model or application-only metadata) or one of these errors:
//
//   - [ModelRetry]: the model is asked to try again; it consumes the tool's
//     retry budget.
//   - [ToolFailed]: a terminal failure the model sees; no budget consumed.
//   - [ApprovalRequired]: the call needs a person's approval first.
//   - [CallDeferred]: the call is executed elsewhere (externally).
//
// Any other error is an unexpected failure: the model sees only
// {"error":"<error type>"} (see [ErrorType]); the message is logged.
//
// # Names
//
// Tool names match [NamePattern] so that they can be used in NATS subjects.
package tool
