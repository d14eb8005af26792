package natsjs

import (
	"context"
	"slices"
	"sync"
)

// slotPool bounds how many tasks a worker holds at once, across its tools.
// A tool's fetcher holds a slot for each task its outstanding pull request
// asks for, so a task is only ever pulled when it can run at once (no
// prefetching). With more tools than free slots, pulls would starve the
// waiting fetchers: so a fetcher that has to wait preempts one long pull
// of another tool, and pulls started while others wait are short, making
// the slots rotate among the tools. A fetcher takes the free slots beyond
// its first only while no fetcher waits (tryAcquire).
//
// Preemption is only across tools: a tool's pulls are never cut short by
// its own fetcher (a cut pull may drop a message already on its way, which then
// waits for its ack wait to be redelivered).
type slotPool struct {
	mu      sync.Mutex
	free    int
	waiters []waiter           // FIFO
	long    map[*pull]struct{} // outstanding long pulls, preemptible
}

type waiter struct {
	ch   chan struct{} // closed when granted a slot
	tool string
}

// pull is one outstanding pull request.
type pull struct {
	cancel context.CancelFunc
	long   bool
	tool   string
}

func newSlotPool(n int) *slotPool {
	return &slotPool{free: n, long: make(map[*pull]struct{})}
}

// acquire takes a slot for a fetcher of tool, waiting (and preempting a
// long pull of another tool) when none is free. It fails only when ctx ends.
func (p *slotPool) acquire(ctx context.Context, tool string) error {
	p.mu.Lock()
	if p.free > 0 && len(p.waiters) == 0 {
		p.free--
		p.mu.Unlock()
		return nil
	}
	ch := make(chan struct{})
	p.waiters = append(p.waiters, waiter{ch: ch, tool: tool})
	for pl := range p.long { // preempt one of another tool
		if pl.tool != tool {
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

// release returns a slot, to the first waiter if any.
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
}

// startPull records a pull about to be issued by a slot holder of tool:
// long when no fetcher of another tool waits for a slot (and then
// preemptible by one), short otherwise.
func (p *slotPool) startPull(cancel context.CancelFunc, tool string) *pull {
	p.mu.Lock()
	defer p.mu.Unlock()
	others := slices.ContainsFunc(p.waiters, func(w waiter) bool { return w.tool != tool })
	pl := &pull{cancel: cancel, long: !others, tool: tool}
	if pl.long {
		p.long[pl] = struct{}{}
	}
	return pl
}

// endPull forgets a pull that returned.
func (p *slotPool) endPull(pl *pull) {
	p.mu.Lock()
	delete(p.long, pl)
	p.mu.Unlock()
}
