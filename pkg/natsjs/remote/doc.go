// Package remote is the agent side of remote tool calls over NATS
// JetStream (SPEC §5).
//
// A [Dispatcher] publishes tasks (Nats-Msg-Id = the task ID) and routes each
// result to the call waiting for it; results that are malformed, oversize,
// for unknown tasks or other conversations, duplicates or late (after a
// cancel) are refused, logged and counted. A [Toolset] is the
// tool.Toolset of what workers advertise; its tools call the dispatcher, so
// the agent loop runs remote tools exactly like local ones. Its
// [Executor] runs the background calls of those tools on the workers, as
// background tasks that outlive a run that pauses.
package remote
