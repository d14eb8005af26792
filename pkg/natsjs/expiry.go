package natsjs

// The approval timeouts of SPEC §12 are scheduled messages (JetStream's
// Nats-Schedule, nats-server 2.12 and later) in the stream Names.Expiries:
// the agent publishes, with an approval's announcement, a schedule on
// <prefix>.expiry.<conv>.<task>.at whose target is
// <prefix>.expiry.<conv>.<task>; at the timeout the server stores the
// schedule's payload, a decision by "timeout", on the target, and the
// decisions stream, which sources the expiries stream with the
// transform <prefix>.expiry.*.* → <prefix>.decision.*.*, stores it on
// the task's decision subject. So the timeout is written while no agent
// or replica runs, and the decisions stream keeps its discard-new limits
// (a stream with schedules cannot discard new). The first decision
// stored wins, as always.

// ExpirySchedule returns the subject of task's timeout schedule in
// conversation conv.
func ExpirySchedule(prefix, conv, task string) string {
	return ExpiryTarget(prefix, conv, task) + ".at"
}

// ExpiryTarget returns the subject the server writes task's timeout
// decision on, which the decisions stream sources.
func ExpiryTarget(prefix, conv, task string) string {
	return NamesFor(prefix).Prefix + ".expiry." + conv + "." + task
}

// ExpirySchedules is the subject filter of every timeout schedule of
// prefix (what the agent role may publish).
func ExpirySchedules(prefix string) string {
	return NamesFor(prefix).Prefix + ".expiry.*.*.at"
}
