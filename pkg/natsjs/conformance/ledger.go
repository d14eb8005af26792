package conformance

import (
	"context"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/offload-dev/offload/pkg/natsjs"
)

// ledgerWatch records the effect ledger's values of the tool's keys
// (bucket <prefix>_effects, keys <tool>.<task>.<attempt>) written from the
// check's start on, in order.
type ledgerWatch struct {
	w       jetstream.KeyWatcher
	updates *events[jetstream.KeyValueEntry]
	done    chan struct{}
}

func watchLedger(ctx context.Context, js jetstream.JetStream, bucket, toolName string) (*ledgerWatch, error) {
	kv, err := js.KeyValue(ctx, bucket)
	if err != nil {
		return nil, err
	}
	w, err := kv.Watch(context.WithoutCancel(ctx), toolName+".>", jetstream.UpdatesOnly())
	if err != nil {
		return nil, err
	}
	l := &ledgerWatch{w: w, updates: newEvents[jetstream.KeyValueEntry](), done: make(chan struct{})}
	go func() {
		defer close(l.done)
		for e := range w.Updates() {
			if e != nil {
				l.updates.add(e)
			}
		}
	}()
	return l, nil
}

func (l *ledgerWatch) stop() {
	if l == nil {
		return
	}
	_ = l.w.Stop()
	<-l.done
}

// of returns the values written under key, in order.
func of(items []jetstream.KeyValueEntry, key string) []jetstream.KeyValueEntry {
	var out []jetstream.KeyValueEntry
	for _, e := range items {
		if e.Key() == key {
			out = append(out, e)
		}
	}
	return out
}

// effectLedger checks the normal task's ledger entry (PROTOCOL.md,
// effects): for a tool not declared idempotent, an entry started by the
// worker, stored before the task's result; nothing is required after it
// (the stored result is the proof of completion, SPEC §13), and anything
// written after it must be finished with the result's status and
// sequence, as workers before issue 40 wrote it. For a tool declared
// idempotent, no entry at all.
func (c *checker) effectLedger(ctx context.Context) Outcome {
	if c.normal == nil {
		return fail("no result to check (see the rule %q)", RuleRun)
	}
	if c.entry == nil {
		return fail("no registry entry to read whether the tool is idempotent (see %s)", RuleRegistryEntry)
	}
	task, r := c.normal.task, c.normal.res
	key := natsjs.EffectKey(task.Tool, task.TaskID, task.Attempt)
	if c.entry.Idempotent {
		if c.ledger != nil {
			items, _ := c.ledger.updates.snapshot()
			if es := of(items, key); len(es) > 0 {
				return fail("the tool is declared idempotent, yet its worker wrote the ledger entry %s (%s): an idempotent tool keeps none, a redelivery runs it again", key, es[0].Value())
			}
		}
		return ok()
	}
	if c.ledger == nil {
		return fail("no effect ledger (KV %s: %v): a worker of a tool not declared idempotent writes started before it runs a task", c.names.EffectsBucket, c.ledgerErr)
	}
	results, err := c.js.Stream(ctx, c.names.Results)
	if err != nil {
		return fail("results stream: %v", err)
	}
	stored, err := results.GetLastMsgForSubject(ctx, r.subject)
	if err != nil {
		return fail("the task's stored result on %s: %v", r.subject, err)
	}
	// The entry was stored before the result, but the watch delivers it
	// in its own time.
	wctx, cancel := context.WithTimeout(ctx, settleWait)
	defer cancel()
	items, _ := c.ledger.updates.wait(wctx, func(items []jetstream.KeyValueEntry) bool { return len(of(items, key)) > 0 })
	es := of(items, key)
	if len(es) == 0 {
		return fail("no ledger entry %s in KV %s: the worker must create started{worker,at} before it runs the tool", key, c.names.EffectsBucket)
	}
	first, err := natsjs.ParseEffect(key, es[0].Value())
	switch {
	case err != nil:
		return fail("ledger entry %s: %v", key, err)
	case es[0].Operation() != jetstream.KeyValuePut || first.Finished != nil || es[0].Created().After(stored.Time):
		return fail("ledger entry %s first written as %s at %s, after the result stored at %s: started must be stored before the tool runs",
			key, es[0].Value(), es[0].Created().Format("15:04:05.000000"), stored.Time.Format("15:04:05.000000"))
	}
	for _, e := range es[1:] {
		later, err := natsjs.ParseEffect(key, e.Value())
		switch {
		case e.Operation() != jetstream.KeyValuePut || err != nil || later.Finished == nil:
			return fail("ledger entry %s written again as %s (%s): after started, a worker writes nothing (the stored result is the proof of completion) or, optionally, finished{status,result_seq}",
				key, e.Value(), e.Operation())
		case later.Finished.ResultSeq != stored.Sequence || later.Finished.Status != r.res.Status:
			return fail("ledger entry %s finished with %+v, want status %s and result_seq %d (the stored result's sequence)",
				key, *later.Finished, r.res.Status, stored.Sequence)
		}
	}
	return ok()
}
