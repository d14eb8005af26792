// Package natsjs is offload's adapter to NATS JetStream and the only package
// that imports nats.go. It provisions the streams, the per-tool consumers and
// the registry KV bucket of the wire protocol (SPEC §5) from the definitions
// embedded in the jetstream/ directory, runs tools on workers ([Worker]),
// sends calls to them from the agent ([Dispatcher], [RemoteToolset]), and
// connects to a server with options fit for long-lived agents and workers.
//
// # Worker
//
// A [Worker] serves tools: one durable pull consumer per tool, shared by
// every replica, so tools scale by adding replicas. It pulls a task only
// when it has a free slot (no prefetching), keeps a running task's delivery
// alive with in-progress acks, validates the arguments against the tool's
// schema, and publishes the result on <prefix>.result.<conversation>.<task>
// with Nats-Msg-Id res:<task>. Cancels on <prefix>.cancel.> reach a running
// tool's context at once; a task cancelled before it was picked up is
// answered cancelled without running. A tool that requires approval runs
// only for a task marked approved; otherwise the answer is approval_required
// (failing closed when a task is published by hand). A panic is an error
// result (Panic), a
// task whose deliveries are exhausted one too (DeliveriesExhausted). Stop
// lets running tasks finish within a grace period and hands the rest back;
// StopAndCancel hands them back at once. The worker advertises its tools in
// the registry bucket, refreshed while it runs.
//
// # Agent side
//
// A [Dispatcher] publishes tasks (Nats-Msg-Id = the task ID) and routes each
// result to the call waiting for it; results that are malformed, oversize,
// for unknown tasks or other conversations, duplicates or late (after a
// cancel) are refused, logged and counted. A [RemoteToolset] is the
// tool.Toolset of what workers advertise; its tools call the dispatcher, so
// the agent loop runs remote tools exactly like local ones.
//
// # Provisioning
//
// [Provision] creates every stream of a prefix, [EnsureTaskConsumer] the
// durable consumer of one tool and [Registry] binds the registry bucket. All
// three are idempotent: a missing asset is created, an existing one with the
// same configuration (the fields the definition sets) is used, and an
// existing one that differs is an [*IncompatibleError] wrapping
// [ErrIncompatibleStream] or [ErrIncompatibleConsumer]; nothing is ever
// updated silently.
//
// The definitions are written for the default prefix "tools"; for another
// prefix, stream names take the upper-cased prefix (TOOLS_TASKS →
// ACME_TASKS), subjects the prefix (tools.task.> → acme.task.>) and the KV
// bucket is <prefix>_registry (see [NamesFor]).
package natsjs
