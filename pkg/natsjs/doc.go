// Package natsjs is offload's adapter to NATS JetStream: with its packages,
// the only code that imports nats.go. This package holds what every process
// on the wire shares: it connects to a server with options fit for
// long-lived agents and workers ([Connect]), names the assets of a prefix
// ([NamesFor]), provisions the streams, the per-tool consumers and the KV
// buckets of the wire protocol (SPEC §5) from the definitions of the
// jetstream/ directory, reports what the server refused, and holds the
// registry entry workers write and agents read, and every sentinel error.
//
// Its packages are split by the role of the process that uses them:
//
//   - natsjs/worker: the toolworker side, a Worker serving tools;
//   - natsjs/remote: the agent side of remote calls, a Dispatcher of tasks,
//     the Toolset of what workers advertise, the Executor of background
//     calls, and a Client that wires them;
//   - natsjs/convstore: durable conversations, their Store, the Inbox of
//     what arrived for them, the Announcer of approvals and the Publisher
//     of decisions and answers;
//   - natsjs/natstest: an in-process nats-server for tests.
//
// A toolworker links natsjs and natsjs/worker only, none of the agent's
// packages.
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
