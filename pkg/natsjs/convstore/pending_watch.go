package convstore

import (
	"context"
	"fmt"
	"sync"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/offload-dev/offload/pkg/protocol"
)

// Changes signals on the returned channel when what waits for a person
// may have changed from now on, until ctx ends: a pending record written
// or deleted (a conversation paused, was continued, or ended), or a
// decision or an answer published (the call it resolves is no longer
// waiting, before any replica saves). It is what the web inbox's live
// updates follow (SPEC §12). Signals coalesce: one pending signal stands
// for any number of changes; the channel carries nothing (read the
// records with [Pending.Get] and [Pending.Waiting]). The channel is
// closed once the watch has ended. The decisions and answers are
// watched with core subscriptions, which the people roles of
// deploy/nats/auth.conf may not hold: agent serve's connection does.
func (p *Pending) Changes(ctx context.Context) (<-chan struct{}, error) {
	out := make(chan struct{}, 1)
	var mu sync.Mutex // a subscription's callback may run after its Unsubscribe
	closed := false
	signal := func() {
		mu.Lock()
		defer mu.Unlock()
		if closed {
			return
		}
		select {
		case out <- struct{}{}:
		default:
		}
	}
	var subs []*nats.Subscription
	unsubscribe := func() {
		for _, s := range subs {
			_ = s.Unsubscribe()
		}
	}
	for _, k := range []protocol.Kind{protocol.KindDecision, protocol.KindAnswer} {
		s, err := p.nc.Subscribe(p.subj.All(k), func(*nats.Msg) { signal() })
		if err != nil {
			unsubscribe()
			return nil, fmt.Errorf("natsjs: watch %s: %w", p.subj.All(k), err)
		}
		subs = append(subs, s)
	}
	w, err := p.kv.WatchAll(ctx, jetstream.UpdatesOnly())
	if err != nil {
		unsubscribe()
		return nil, fmt.Errorf("natsjs: watch the pending records: %w", err)
	}
	go func() {
		defer func() {
			mu.Lock()
			closed = true
			close(out)
			mu.Unlock()
		}()
		defer unsubscribe()
		defer func() { _ = w.Stop() }()
		for {
			select {
			case <-ctx.Done():
				return
			case e, ok := <-w.Updates():
				if !ok {
					return
				}
				if e != nil { // nil: the end of the initial values (none)
					signal()
				}
			}
		}
	}()
	return out, nil
}
