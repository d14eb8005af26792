// Package natsjs is offload's adapter to NATS JetStream and the only package
// that imports nats.go. It provisions the streams, the per-tool consumers and
// the registry KV bucket of the wire protocol (SPEC §5) from the definitions
// embedded in the jetstream/ directory, and connects to a server with
// options fit for long-lived agents and workers.
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
