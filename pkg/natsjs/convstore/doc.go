// Package convstore keeps offload's durable conversations in JetStream
// (SPEC §5.5): the [conversation.Store] on a KV bucket (with an object
// store for histories too large for one message, and the lease that lets
// one process at a time work on a conversation), the [Inbox] that reads
// what arrived for a paused conversation from the streams themselves
// (decisions, answers, workers' results), and the [Announcer] that tells
// people and UIs which calls wait for their approval.
package convstore
