package remote

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/offload-dev/offload/pkg/natsjs"
	"github.com/offload-dev/offload/pkg/natsjs/internal/jsop"
)

// convReader reads one conversation's results (DispatcherConfig.
// PerConversation): an ordered consumer filtered to
// <prefix>.result.<conv>.>, made by the conversation's first dispatch or
// attach.
type convReader struct {
	ready chan struct{} // closed once made (or failed)
	cons  jetstream.Consumer
	cc    jetstream.ConsumeContext
	err   error
}

// follow makes sure the results of conversation conv reach the
// dispatcher before a task of it is registered: with
// DispatcherConfig.PerConversation, its ordered consumer is made (results
// stored from now on: what was stored before is the inbox's) unless it
// exists;
// otherwise the process's consumer reads every conversation's.
func (d *Dispatcher) follow(ctx context.Context, conv string) error {
	if !d.cfg.PerConversation {
		return nil
	}
	d.mu.Lock()
	if !d.life.Running() {
		d.mu.Unlock()
		return natsjs.ErrStopped
	}
	r, ok := d.readers[conv]
	if !ok {
		r = &convReader{ready: make(chan struct{})}
		d.readers[conv] = r
	}
	d.mu.Unlock()
	if ok {
		select {
		case <-r.ready:
			if r.err != nil {
				return d.follow(ctx, conv) // the failed one is gone: try again
			}
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	var cons jetstream.Consumer
	var cc jetstream.ConsumeContext
	_, err := jsop.Retry(ctx, d.log, "results consumer", func(ctx context.Context) (err error) {
		start, err := d.startSeq(ctx)
		if err != nil {
			return err
		}
		cons, err = d.js.OrderedConsumer(ctx, natsjs.NamesFor(d.cfg.Prefix).Results, resultsConsumer(d.subj.ResultsFor(conv), start))
		if err != nil {
			return err
		}
		cc, err = cons.Consume(d.onResult, d.consumeError(conv))
		return err
	})
	d.mu.Lock()
	if err != nil {
		r.err = fmt.Errorf("natsjs: dispatcher: results consumer of %s: %w", conv, err)
		delete(d.readers, conv)
	} else {
		r.cons, r.cc = cons, cc
	}
	d.mu.Unlock()
	close(r.ready)
	return r.err
}

// Unfollow stops reading conversation conv's results
// (DispatcherConfig.PerConversation): its run on this process has ended,
// and what arrives for it later is read by whoever continues it, from the
// stream. A later dispatch or attach for conv reads them again. Without
// PerConversation it does nothing.
func (d *Dispatcher) Unfollow(conv string) {
	d.mu.Lock()
	r := d.readers[conv]
	delete(d.readers, conv)
	d.mu.Unlock()
	if r == nil {
		return
	}
	<-r.ready
	if r.cc == nil {
		return
	}
	r.cc.Stop()
	<-r.cc.Closed()
	// An ordered consumer stopped lingers on the server until its
	// inactivity threshold: deleted at once, so that a replica running
	// many conversations in turn does not leave one per conversation.
	ctx, cancel := context.WithTimeout(context.Background(), jsop.Timeout)
	defer cancel()
	if info := r.cons.CachedInfo(); info != nil {
		if err := d.js.DeleteConsumer(ctx, info.Stream, info.Name); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
			d.log.Debug("results consumer not deleted; it lapses by itself", slog.String("consumer", info.Name), slog.Any("error", err))
		}
	}
}

// stopReaders stops every conversation's results consumer (Stop).
func (d *Dispatcher) stopReaders() {
	d.mu.Lock()
	convs := make([]string, 0, len(d.readers))
	for conv := range d.readers {
		convs = append(convs, conv)
	}
	d.mu.Unlock()
	for _, conv := range convs {
		d.Unfollow(conv)
	}
}
