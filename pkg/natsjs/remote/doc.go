// Package remote is the agent side of remote tool calls over NATS
// JetStream (SPEC §5).
//
// A [Dispatcher] publishes tasks (Nats-Msg-Id: [protocol.TaskMsgID]) and
// routes each result to the call waiting for it; results that are
// malformed, oversize, for unknown tasks or other conversations, duplicates
// or late (after a cancel) are refused, logged and counted. A [Toolset] is the
// tool.Toolset of what workers advertise; its tools call the dispatcher, so
// the agent loop runs remote tools exactly like local ones. Its
// [Executor] runs the background calls of those tools on the workers, as
// background tasks that outlive a run that pauses.
//
// A [Client] wires them for an agent process: a dispatcher, the toolset
// and its executor (with a fallback for the other tools), and optionally a
// worker of the process for local tools (the embedded default's built-in
// tools), started and stopped together. Every long-lived part has the same
// lifecycle: Start (it does not block), Stop (idempotent, waiting) and
// Stopped. One verb names waiting for a task this process did not publish:
// Attach ([Dispatcher.Attach] for one task, [Executor.Attach] for a run
// taking over a task an earlier run left running, [Client.Attach] for a
// resume before it reads the results stream).
package remote
