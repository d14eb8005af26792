// Package agent runs conversations between a model and tools: the run loop,
// its events, usage limits, capabilities, and deferred tool calls (human
// approval and external execution).
//
// # The loop
//
// [Agent.Run] sends the history to the model; when the response calls tools,
// the calls of that response run in parallel (a Sequential tool runs alone),
// their results are placed in the model's emission order, and the next
// request carries them. The run ends when the model answers without calls and
// nothing is queued. Before a batch runs, the tool-call limit is checked for
// the whole batch (all or nothing); before every model request, the request
// limit. A [tool.ModelRetry] or invalid arguments send a retry prompt and use
// the tool's retry budget; [tool.ToolFailed] is a failed return; any other
// error is shown to the model only as {"error":"<type>"}; a panicking tool
// is such an error, [Panic], and the process survives.
//
// # Ending a run
//
// RunContext.Cancel ends the run with [ErrRunCancelled]; cancelling the
// run's context (SIGINT) interrupts it. Both are checked at every boundary
// where a new side effect could start: before each model request, before
// each group of tools (and each sequential tool), before asking the
// deferred handlers and before a pause. A step that ends the run records
// the results of the tools that ran and a cancelled return for the others,
// so a continued history never repeats a side effect. A new prompt on a
// history whose last response has calls without results fails with
// [ErrPendingCalls]; without a prompt those calls are processed (approvals
// are deferred again). A call left without a result earlier in a history
// gets a synthetic cancelled return. Messages enqueued in a step that
// pauses are kept in the history and reach the model on resume; Enqueue
// after the run ended returns tool.ErrNoRun.
//
// # Deferred calls
//
// Calls of tools with RequiresApproval, of external tools, and calls whose
// tool or args validator returned [tool.ApprovalRequired] or
// [tool.CallDeferred] are deferred. They are first offered to the
// [DeferredHandler] capabilities (see [HandleDeferredToolCalls]); what remains
// ends the run with Result.Deferred (when Config.AllowDeferred or
// RunOptions.AllowDeferred is set; otherwise the run fails with
// ErrDeferredNotAllowed). A follow-up run passes the history and
// RunOptions.DeferredResults; it gets a new run ID and keeps the
// conversation ID. Each deferred call gets a ULID task ID when first deferred,
// kept in the response's metadata so it survives resumes and processes.
//
// # Background tools
//
// Package agent/background holds the background capability (SPEC §4 and
// §12): calls that return at once and deliver their outcome later as a
// follow-up message, its executors (in-process, or natsjs/remote's
// workers) and non-blocking deferred calls. It talks to the loop through
// the hooks below only. What the loop keeps of that work is its
// vocabulary: a running task's handle ([BackgroundTask]), the tasks an
// earlier run left (RunOptions.Background, [AdoptedTask]), the calls a
// tool hands off when the run suspends ([Handoff], [Suspending]), and
// Result.Background, which lists what a paused run waits for.
//
// # Capabilities and their hooks
//
// A [Capability] is any value implementing one or more hook interfaces;
// capabilities run in order (agent's, then the run's):
//
//   - [RunWrapper].WrapRun: around the whole run (start and stop owned work).
//   - [ToolsPreparer].PrepareTools: once per step, to change the offered tools.
//   - [InstructionsProvider].Instructions: text added to the system prompt of
//     a new conversation.
//   - [ModelRequestHook].BeforeModelRequest: between model requests, before
//     each one; may add parts to the request.
//   - [ToolCallPreparer].PrepareToolCall: before a call's arguments are
//     validated; may rewrite them, refuse them with a retry, or name the
//     task that will run the call.
//   - [ToolCallWrapper].WrapToolCall: around each tool call's execution, after
//     its arguments were validated (run it remotely, in the background, …).
//   - [DeferredHandler].HandleDeferred: once per step with the deferred calls
//     still unresolved (the chain of [HandleDeferredToolCalls]).
//   - [StepHook].AfterStep: after each model response was handled; may keep a
//     run going that would otherwise end.
//   - [IdleHook].WhenIdle: when the model ended its turn, or a request
//     would carry nothing; may wait for work that runs elsewhere, and pause
//     or suspend the run.
//   - [DeferredHolder].HoldDeferred: once per step, before the deferred
//     handlers; holds calls whose outcome comes later (non-blocking calls).
//   - [HandoffKeeper]: keeps a call its tool hands off as the run suspends.
//
// # Events
//
// RunOptions.OnEvent and [Agent.Iter] deliver the [Event]s of SPEC §6.3 in
// order: run_started, model_request_started, text_delta, tool_call,
// tool_result, deferred_tool_requests, deferred_tool_results, the
// background and progress events (the background capability emits its own
// through RunInfo.Emit), and always final last: nothing is emitted after
// it (a leftover goroutine's progress report is dropped).
package agent
