package web

import (
	"context"
	"sync"
)

// changes are the inbox's change signals on a replica: one watch of the
// pending desk's changes (pending.Desk.Changes: the pending records'
// watch, and subscriptions to the decisions and answers published) while
// any inbox is open, each signal fanned out to every open inbox in the
// process, so that a hundred open inboxes cost the service's connection
// one watch, not a hundred (each would receive every decision message).
// The watch stops when the last inbox closes.
type changes struct {
	watch func(ctx context.Context) (<-chan struct{}, error)

	mu  sync.Mutex
	cur *changeFeed // nil while no inbox is open
}

// changeFeed is one watch and its subscribers.
type changeFeed struct {
	cancel context.CancelFunc
	done   chan struct{} // closed once the watch has ended
	subs   map[chan struct{}]struct{}
	ended  bool // the watch ended: its subscribers' channels are closed
}

// subscribe returns a channel that receives a signal (coalesced)
// whenever what waits may have changed, closed if the watch fails, and
// the function that unsubscribes (stopping the watch when it was the
// last).
func (c *changes) subscribe(ctx context.Context) (<-chan struct{}, func(), error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	f := c.cur
	if f == nil {
		// The watch lives as long as its subscribers, not as this
		// request.
		wctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		ch, err := c.watch(wctx)
		if err != nil {
			cancel()
			return nil, nil, err
		}
		f = &changeFeed{cancel: cancel, done: make(chan struct{}), subs: map[chan struct{}]struct{}{}}
		c.cur = f
		go c.follow(f, ch)
	}
	sub := make(chan struct{}, 1)
	f.subs[sub] = struct{}{}
	return sub, func() { c.unsubscribe(f, sub) }, nil
}

// follow passes each signal of ch to every subscriber of f, without
// waiting, until ch is closed; then it closes the subscribers' channels.
func (c *changes) follow(f *changeFeed, ch <-chan struct{}) {
	defer close(f.done)
	for range ch {
		c.mu.Lock()
		for sub := range f.subs {
			select {
			case sub <- struct{}{}:
			default: // one pending signal stands for any number
			}
		}
		c.mu.Unlock()
	}
	f.cancel()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cur == f {
		c.cur = nil
	}
	for sub := range f.subs {
		close(sub)
	}
	f.ended = true
}

// unsubscribe takes sub out of f, stopping f's watch when it was the
// last subscriber.
func (c *changes) unsubscribe(f *changeFeed, sub chan struct{}) {
	c.mu.Lock()
	if f.ended {
		c.mu.Unlock()
		return
	}
	delete(f.subs, sub)
	last := len(f.subs) == 0 && c.cur == f
	if last {
		c.cur = nil
	}
	c.mu.Unlock()
	if last {
		f.cancel()
		<-f.done
	}
}
