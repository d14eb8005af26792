package worker

import "github.com/nats-io/nats.go/jetstream"

// A task's deliveries are limited by the workers, not by the server (SPEC
// §5.3): the task consumer's max_deliver is -1, so the server never gives
// up on a task, and its delivery limit travels in the consumer's metadata
// (natsjs.MaxDeliverKey, 20 in jetstream/consumers/task.json). A worker
// that receives a delivery past the limit answers the task with a
// DeliveriesExhausted result without running it, then terminates the
// delivery. A task whose deliveries ran out while no replica was connected
// is so answered by the next replica that pulls it; and no worker needs a
// grant over the whole tasks stream (to load or delete a task the server
// gave up on), only its own consumer's.

// deliveryLimit returns toolName's delivery limit, read from its consumer
// when its part started (0: none, the server's max_deliver governs; also
// for a tool retired meanwhile, whose running calls are past this check).
func (w *Worker) deliveryLimit(toolName string) int {
	if p := w.partOf(toolName); p != nil {
		return p.limit
	}
	return 0
}

// overLimit reports whether the delivery md is past toolName's delivery
// limit, and the limit.
func (w *Worker) overLimit(toolName string, md *jetstream.MsgMetadata) (limit int, over bool) {
	limit = w.deliveryLimit(toolName)
	return limit, md != nil && limit > 0 && md.NumDelivered > uint64(limit)
}
