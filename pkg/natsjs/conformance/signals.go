package conformance

import (
	"context"
	"syscall"

	"github.com/offload-dev/offload/pkg/protocol"
	"github.com/offload-dev/offload/pkg/tool"
)

// unknownEffect reports whether res answers an attempt whose worker
// stopped before its result was stored, for a tool not declared
// idempotent: approval_required with offload.effect "unknown" (SPEC §13).
func unknownEffect(res protocol.Result) bool {
	return res.Status == protocol.StatusApprovalRequired && res.Metadata[tool.EffectMetaKey] == tool.EffectUnknown
}

// sigterm checks the graceful stop: a worker told to stop (SIGTERM) while
// it runs a task settles that task before it exits, by finishing it
// within its grace period (a result, then an ack) or by handing it back
// (nak), so that another replica starts it at once, not after the ack
// wait. The worker is started again afterwards.
func (c *checker) sigterm(ctx context.Context) Outcome {
	if c.proc == nil {
		return skip("no --exec: the kit does not start the worker, so it cannot stop it")
	}
	task, seq, stop := c.slowDelivered(ctx)
	if stop != nil {
		return *stop
	}
	if err := c.proc.signal(syscall.SIGTERM); err != nil {
		return fail("SIGTERM: %v", err)
	}
	exited := c.proc.exited(ctx, c.cfg.Timeout)
	if !exited {
		c.proc.kill()
	}
	// The worker's last acks may reach the kit just after its exit.
	wctx, cancel := context.WithTimeout(ctx, settleWait)
	items, _ := c.obs.acks.wait(wctx, func(items []ackEvent) bool {
		for _, a := range acksOf(items, seq) {
			if a.kind == ackNak || a.kind == ackAck || a.kind == ackTerm {
				return true
			}
		}
		return false
	})
	cancel()
	var o Outcome
	switch verdict := handBack(acksOf(items, seq)); {
	case !exited:
		o = fail("still running %s after SIGTERM (killed)", c.cfg.Timeout)
	case verdict == ackNak:
		o = ok()
	case verdict == ackAck && len(c.awaitResults(ctx, task.ConversationID, 1, settleWait)) > 0:
		o = ok() // finished within its grace period
	case verdict == ackTerm:
		o = fail("the running task was terminated on SIGTERM: hand it back (nak) for another replica")
	default:
		o = fail("exited on SIGTERM without handing back the running task (no nak, no result): another replica starts it only after the ack wait %s", c.ackWait)
	}
	if err := c.startWorker(ctx); err != nil {
		return fail("%s; started again: %v", o.Detail, err)
	}
	return o
}

// handBack is how the first delivery of a task was settled: the first
// nak, ack or term of it ("" when none).
func handBack(acks []ackEvent) ackKind {
	for _, a := range acks {
		if a.delivered == 1 && (a.kind == ackNak || a.kind == ackAck || a.kind == ackTerm) {
			return a.kind
		}
	}
	return ""
}

// sigkill checks recovery from a worker killed while it runs a task: the
// task is delivered again (after the ack wait) to the worker started
// again, which answers it with one stored result: the tool's (run again),
// or, for a tool not declared idempotent, an unknown effect sent to a
// person (SPEC §13: not run twice).
func (c *checker) sigkill(ctx context.Context) Outcome {
	if c.proc == nil {
		return skip("no --exec: the kit does not start the worker, so it cannot kill it")
	}
	task, seq, stop := c.slowDelivered(ctx)
	if stop != nil {
		return *stop
	}
	c.proc.kill()
	if rs := resultsOf(func() []resultMsg { items, _ := c.obs.results.snapshot(); return items }(), task.ConversationID); len(rs) > 0 {
		return fail("%s before the kill: the slow arguments must run longer", describe(rs[0]))
	}
	if err := c.startWorker(ctx); err != nil {
		return fail("started again after SIGKILL: %v", err)
	}
	rs := c.awaitResults(ctx, task.ConversationID, 1, c.cfg.Timeout+2*c.ackWait)
	if len(rs) == 0 {
		return fail("%s after the worker was killed and started again", c.noResult(seq, c.cfg.Timeout+2*c.ackWait))
	}
	if rs[0].err != nil || (rs[0].res.Status != protocol.StatusOK && !unknownEffect(rs[0].res)) {
		return fail("%s for the redelivered task, want status ok (or, for a tool not declared idempotent, approval_required with %s %q: SPEC §13)",
			describe(rs[0]), tool.EffectMetaKey, tool.EffectUnknown)
	}
	if a, ok := c.awaitSettled(ctx, seq, settleWait); !ok || a.kind != ackAck || a.delivered < 2 {
		return fail("the redelivery was not acked (saw %+v)", a)
	}
	if n, err := c.stored(ctx, task.ConversationID); err != nil || n != 1 {
		return fail("%d results stored for the task (%v)", n, err)
	}
	return ok()
}
