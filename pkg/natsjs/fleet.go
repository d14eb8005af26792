package natsjs

// The headers of a dead letter (SPEC §19), beside the task's own: why its
// deliveries ended (DeliveriesExhausted, or RateLimited on its last), the
// worker that kept it, and how many deliveries it had.
const (
	DeadReasonHeader     = "Offload-Dead-Reason"
	DeadWorkerHeader     = "Offload-Dead-Worker"
	DeadDeliveriesHeader = "Offload-Dead-Deliveries"
)
