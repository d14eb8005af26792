// Package worker serves tools to offload agents over NATS JetStream: the
// toolworker side of the wire protocol (SPEC §5.3).
//
// A [Worker] serves tools: one durable pull consumer per tool, shared by
// every replica, so tools scale by adding replicas. It pulls a task only
// when it has a free slot (no prefetching), keeps a running task's delivery
// alive with in-progress acks, validates the arguments against the tool's
// schema, and publishes the result on <prefix>.result.<conversation>.<task>.<tool>
// with Nats-Msg-Id res:<task>:<attempt>. Cancels on <prefix>.cancel.*.*.<tool> reach
// a running tool's context at once; a task cancelled before it was picked up is
// answered cancelled without running. After a disconnect the worker looks
// cancels up in the cancel stream until it has caught up (a cancel
// published while it was away still stops the task), and a task whose
// look-up fails is handed back, never run blind. A finished tool's result is
// kept and its publish retried, with the delivery kept alive, so a tool is
// never run again for want of a publish. A tool that requires approval runs
// only for a task marked approved; otherwise the answer is approval_required
// (failing closed when a task is published by hand). A task past its
// deadline is answered DeadlineExceeded without running. A panic is an
// error result (Panic), a task whose deliveries are exhausted one too
// (DeliveriesExhausted): the limit is the consumer's metadata's, the
// server never gives up, and the replica that receives a delivery past the
// limit answers it without running it. Stop lets running tasks
// finish within a grace period, hands the rest back (nak) and flushes before
// it returns; StopAndCancel hands them back at once. The worker advertises
// its tools in the registry bucket, refreshed while it runs.
//
// Every delivered task goes through the rules of a task, in order, until
// one settles its delivery: decode, hold, delivery limit, cancelled,
// deadline, authentication, approval, arguments, effect ledger, run and
// respond ([Rules]; docs/PROTOCOL.md, "The rules of a task").
package worker
