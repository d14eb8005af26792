package convstore

import (
	"context"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"
)

// Changes signals on the returned channel when a pending record is
// written or deleted from now on (a conversation paused, was answered and
// continued, or ended), until ctx ends: what the web inbox's live updates
// follow (SPEC §12). Signals coalesce: one pending signal stands for any
// number of changes; the channel carries no record (read them with
// [Pending.Get]). The channel is closed once the watch has ended.
func (p *Pending) Changes(ctx context.Context) (<-chan struct{}, error) {
	w, err := p.kv.WatchAll(ctx, jetstream.UpdatesOnly())
	if err != nil {
		return nil, fmt.Errorf("natsjs: watch the pending records: %w", err)
	}
	out := make(chan struct{}, 1)
	go func() {
		defer close(out)
		defer func() { _ = w.Stop() }()
		for {
			select {
			case <-ctx.Done():
				return
			case e, ok := <-w.Updates():
				if !ok {
					return
				}
				if e == nil {
					continue // the end of the initial values: there are none
				}
				select {
				case out <- struct{}{}:
				default:
				}
			}
		}
	}()
	return out, nil
}
