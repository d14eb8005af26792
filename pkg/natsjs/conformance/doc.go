// Package conformance is the conformance kit for workers (`toolworker
// check`, SPEC §15): it plays the agent's part on the wire against a worker
// under test, in any language, and checks it against the rules of
// docs/PROTOCOL.md, one [Outcome] per rule.
//
// The kit needs a connection allowed what an agent and an operator may do:
// publish tasks and cancels, read the results stream, the registry bucket
// and the task consumer's info, and subscribe to the task consumer's acks
// (core NATS: it observes the worker's acks, in-progress acks, naks and
// terms, and the delivery count each carries). Every rule uses a
// conversation of its own, so that any result the worker publishes for it,
// under whatever task ID, is seen.
package conformance
