// Package background is the background capability of the agent loop
// (SPEC §4 and §12): tool calls that return at once and deliver their
// outcome later, the executors that run them, and non-blocking deferred
// calls. It reaches the loop only through the hooks of package agent.
//
// # Background tools
//
// [Tools] runs chosen calls in the background: a call returns at once with
// an acknowledgement naming its task (a ULID), the run goes on, and the
// outcome reaches the model later as a follow-up user message, between
// model requests. When the model ends its turn while tasks are live, the
// run waits for the next outcome; Run returns only when no task is live.
// Tools are chosen by a [Selector] (metadata background: true by default,
// names, or a predicate); metadata background: "optional" lets the model
// choose with run_in_background. Each live task holds one tool call slot.
// Ending a run cancels the live tasks; a pause (or RunOptions.Suspend,
// SIGTERM) detaches those whose executor can and lists them in
// Result.Background, so that agent.Result.PendingRecord holds everything a
// paused conversation waits for. The events background_task_started,
// background_task_finished and progress (with the task ID) follow the
// tasks; tool_call carries the task ID.
//
// # Executors
//
// An [Executor] starts the calls: [InProcessExecutor] (goroutines) by
// default, or natsjs/remote's, which hands them to workers. An [Attacher]
// can also take over the tasks an earlier run left running
// (RunOptions.Background) and keep the calls tools hand off when the run
// suspends (agent.Handoff). Package agent/bgtest holds the scenario suite
// every executor must pass.
//
// # Non-blocking deferred calls
//
// With [Config].NonBlocking (or [NonBlockingCalls]), the approval-gated
// and external calls it chooses return an acknowledgement at once too;
// their decision or answer comes through a [DeferredWaiter] ([Decisions]
// in process, pkg/session's from JetStream), and an approved call then
// runs in the background.
//
// # Hooks
//
// The capability implements these hooks of package agent:
// InstructionsProvider (the texts of SPEC §4), RunWrapper (it owns the
// run's tasks: adopts, detaches, cancels), ToolsPreparer and
// ToolCallPreparer (the run_in_background flag, the task's ID),
// ToolCallWrapper (starts a background call), ModelRequestHook (delivers
// what arrived), IdleHook (waits for an outcome, or pauses while only
// decisions are awaited), DeferredHolder (holds non-blocking calls) and
// HandoffKeeper (keeps a call handed off).
package background
