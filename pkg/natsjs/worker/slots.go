package worker

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
)

// slotPool bounds how many tasks a worker holds at once, across its tools.
// A tool's fetcher holds a slot for each task its outstanding pull
// requests ask for, so a task is only ever pulled when it can run at once
// (no prefetching). With more tools than free slots, pulls would starve
// the waiting fetchers: so a fetcher that has to wait preempts the long
// pulls of one other tool, and pulls started while others wait are short,
// making the slots rotate among the tools. A fetcher takes the free slots
// beyond its first only while no fetcher waits (tryAcquire); a fetcher
// whose requests are outstanding learns of slots freed meanwhile from a
// watch channel.
//
// Preemption is across tools: a tool's pulls are never cut short by its
// own fetcher, nor by its own queue's pump while tasks wait in its
// consumer (a cut pull may drop a message already on its way, which then
// waits for its ack wait to be redelivered: the pump once cut them so, and
// a flood's calls started ten seconds late); while its pump waits for a
// slot, its fetcher's pulls are short, so that the pump waits at most one
// short pull, or none once the consumer is drained (its long pulls, quiet,
// are then cut: no task is on its way to them but one stored just then).
type slotPool struct {
	mu       sync.Mutex
	free     int
	waiters  []waiter                // FIFO
	long     map[*longPulls]struct{} // fetchers with long pulls outstanding, preemptible
	watchers []chan struct{}         // told when a slot becomes free
}

type waiter struct {
	ch    chan struct{} // closed when granted a slot
	tool  string
	queue bool // the tool's pump, for a call of its queue
}

// longPulls are a fetcher's long pull requests, which cancel abandons.
type longPulls struct {
	cancel func()
	tool   string
	// quiet says the fetcher's last delivery left no task waiting in the
	// consumer: its tool's own pump may then preempt them, no task being
	// on its way to them but one stored just then.
	quiet *atomic.Bool
}

func newSlotPool(n int) *slotPool {
	return &slotPool{free: n, long: make(map[*longPulls]struct{})}
}

// acquire takes a slot for a fetcher of tool, waiting (and preempting a
// long pull of another tool) when none is free. It fails only when ctx ends.
func (p *slotPool) acquire(ctx context.Context, tool string) error {
	return p.take(ctx, waiter{tool: tool})
}

// acquireQueued takes a slot for the pump of tool's queue, as acquire
// does: it preempts no pull of tool's own, whose pulls are short while it
// waits.
func (p *slotPool) acquireQueued(ctx context.Context, tool string) error {
	return p.take(ctx, waiter{tool: tool, queue: true})
}

func (p *slotPool) take(ctx context.Context, wt waiter) error {
	tool := wt.tool
	p.mu.Lock()
	if p.free > 0 && len(p.waiters) == 0 {
		p.free--
		p.mu.Unlock()
		return nil
	}
	ch := make(chan struct{})
	wt.ch = ch
	p.waiters = append(p.waiters, wt)
	for pl := range p.long { // preempt one of another tool, or a quiet one of its own for its pump
		if pl.tool != tool || (wt.queue && pl.quiet != nil && pl.quiet.Load()) {
			delete(p.long, pl)
			pl.cancel()
			break
		}
	}
	p.mu.Unlock()
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		p.mu.Lock()
		if i := slices.IndexFunc(p.waiters, func(w waiter) bool { return w.ch == ch }); i >= 0 {
			p.waiters = slices.Delete(p.waiters, i, i+1)
			p.mu.Unlock()
		} else { // granted meanwhile: give it back
			p.mu.Unlock()
			p.release()
		}
		return ctx.Err()
	}
}

// tryAcquire takes up to n more free slots for a fetcher without
// waiting, and returns how many it took: none while any fetcher waits for
// a slot, so that a batch does not take the slots others queue for.
func (p *slotPool) tryAcquire(n int) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.waiters) > 0 {
		return 0
	}
	n = min(n, p.free)
	p.free -= n
	return n
}

// release returns a slot, to the first waiter if any; otherwise the
// watchers are told that a slot is free.
func (p *slotPool) release() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.waiters) > 0 {
		w := p.waiters[0]
		p.waiters = p.waiters[1:]
		close(w.ch)
		return
	}
	p.free++
	for _, ch := range p.watchers {
		select {
		case ch <- struct{}{}:
		default: // told already
		}
	}
}

// watch returns a channel that receives when a slot has become free
// (several frees may be told once), until unwatch.
func (p *slotPool) watch() chan struct{} {
	ch := make(chan struct{}, 1)
	p.mu.Lock()
	p.watchers = append(p.watchers, ch)
	p.mu.Unlock()
	return ch
}

func (p *slotPool) unwatch(ch chan struct{}) {
	p.mu.Lock()
	p.watchers = slices.DeleteFunc(p.watchers, func(c chan struct{}) bool { return c == ch })
	p.mu.Unlock()
}

// canPullLong reports whether a pull of tool may be long: no fetcher of
// another tool, nor a pump, waits for a slot (otherwise pulls are short,
// so that the slots rotate among the tools and the queues).
func (p *slotPool) canPullLong(tool string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return !slices.ContainsFunc(p.waiters, func(w waiter) bool { return w.tool != tool || w.queue })
}

// startLongPulls records that a fetcher of tool holds slots in long pulls,
// which a fetcher of another tool that has to wait may preempt by calling
// cancel (once, under the pool's lock).
func (p *slotPool) startLongPulls(cancel func(), tool string, quiet *atomic.Bool) *longPulls {
	pl := &longPulls{cancel: cancel, tool: tool, quiet: quiet}
	p.mu.Lock()
	p.long[pl] = struct{}{}
	p.mu.Unlock()
	return pl
}

// endLongPulls forgets a fetcher's long pulls (ended, or abandoned).
func (p *slotPool) endLongPulls(pl *longPulls) {
	p.mu.Lock()
	delete(p.long, pl)
	p.mu.Unlock()
}
