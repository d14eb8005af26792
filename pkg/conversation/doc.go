// Package conversation holds what outlives an agent process: a
// conversation's [State] (its history, what its last run left pending, the
// decisions, answers and outcomes that arrived for it, and how far the
// streams carrying them have been read), the [Store] interface that keeps
// it, with compare-and-set saves and [Lease]s that let one process at a
// time work on a conversation (SPEC §5.5), and [Memory], an in-process
// store for tests and single-process use. natsjs/convstore implements the store on
// JetStream.
package conversation
