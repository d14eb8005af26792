// Package natsjs is offload's adapter to NATS JetStream and the only package
// that imports nats.go. It provisions the streams, the per-tool consumers and
// the registry KV bucket of the wire protocol (SPEC §5) from the definitions
// embedded in the jetstream/ directory, runs tools on workers ([Worker]),
// sends calls to them from the agent ([Dispatcher], [RemoteToolset]), and
// connects to a server with options fit for long-lived agents and workers.
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
// durable task consumer of one tool, [EnsureExhaustedConsumer] its durable
// consumer of max-deliveries advisories (on the stream that captures them,
// so that a task the server gave up on is answered even when no worker was
// listening) and [EnsureRegistry] binds the registry bucket. All are idempotent: a missing asset is created, an existing one with the
// same configuration (the fields the definition sets) is used, one that
// differs only in fields JetStream updates in place (a stream's limits; a
// task consumer's ack_wait, backoff, max_deliver, max_ack_pending) is
// updated to the definition, and any other difference is an
// [*IncompatibleError] wrapping [ErrIncompatibleStream] or
// [ErrIncompatibleConsumer].
//
// The definitions are written for the default prefix "tools"; for another
// prefix, stream names take the upper-cased prefix (TOOLS_TASKS →
// ACME_TASKS), subjects the prefix (tools.task.> → acme.task.>, the
// advisories of TOOLS_TASKS → those of ACME_TASKS) and the KV bucket is
// <prefix>_registry (see [NamesFor]).
//
// # Permissions
//
// A server refuses what a user may not do asynchronously: a refused request
// gets no reply, a refused publish no acknowledgement. [Connect] turns each
// permissions violation into a [*PermissionError] (the user, the refused
// subject, and the fix: the inbox prefix to use, or the role of
// deploy/nats/auth.conf that is needed), logs it and records it in
// ConnectOptions.Refusals; [Refusals.Watch] ends a start-up at the first
// one, and the provisioning calls explain their failure with it.
package natsjs
