// Package serve is the library under `agent serve` (SPEC §11): replicas
// that together own the stored conversations and continue each one, on
// any replica and exactly once, as soon as what it waits for has arrived.
//
// A [Service] starts conversations ([Service.Start]), wakes the paused
// ones ([Service.Wake]) from the wake consumers (one durable, headers-only
// consumer on each of the decisions, answers and results streams, shared
// by every replica, so that each message reaches one replica), and
// reports them ([Service.Get]). A wake claims the conversation's lease
// without waiting: while another process holds it the message is
// redelivered later, so that a run ending just after the message was
// stored cannot miss it; the exactly-once of a continuation comes from
// the lease and the conversation's checkpoint, not from the (at least
// once) wake consumer. [Handler] is the HTTP API over a Service.
package serve
