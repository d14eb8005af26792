package convstore

import (
	"context"
	"fmt"
	"log/slog"
	"sync"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/offload-dev/offload/pkg/conversation"
)

// Watch signals on the returned channel when a message of one of kinds is
// stored for conversation conv from now on, so that a caller waiting for
// decisions or answers reads them (with [Inbox.Collect] or
// [Inbox.CollectDecisions]) when they arrive instead of polling. Signals
// coalesce: one pending signal stands for any number of messages. The
// channel carries no message, and reading is the collector's job: a
// signal may come for a message already read. Stop ends the watch; it is
// also ended with ctx.
func (in *Inbox) Watch(ctx context.Context, conv string, kinds ...conversation.ArrivalKind) (signal <-chan struct{}, stop func(), err error) {
	ch := make(chan struct{}, 1)
	var ccs []jetstream.ConsumeContext
	stopAll := func() {
		for _, cc := range ccs {
			cc.Stop()
		}
	}
	for _, kind := range kinds {
		stream, filter, err := in.watched(kind, conv)
		if err != nil {
			stopAll()
			return nil, nil, err
		}
		cons, err := in.cfg.JetStream.OrderedConsumer(ctx, stream, jetstream.OrderedConsumerConfig{
			FilterSubjects: []string{filter}, DeliverPolicy: jetstream.DeliverNewPolicy,
		})
		if err != nil {
			stopAll()
			return nil, nil, fmt.Errorf("natsjs: watch %s: %w", filter, err)
		}
		cc, err := cons.Consume(func(jetstream.Msg) {
			select {
			case ch <- struct{}{}:
			default:
			}
		}, jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
			in.log.Debug("inbox watch", slog.String("subject", filter), slog.Any("error", err))
		}))
		if err != nil {
			stopAll()
			return nil, nil, fmt.Errorf("natsjs: watch %s: %w", filter, err)
		}
		ccs = append(ccs, cc)
	}
	// Ended by stop or with ctx, whichever comes first, once.
	var once sync.Once
	end := func() { once.Do(stopAll) }
	unregister := context.AfterFunc(ctx, end)
	return ch, func() { unregister(); end() }, nil
}

// watched returns the stream and subject filter of kind's messages for
// conv.
func (in *Inbox) watched(kind conversation.ArrivalKind, conv string) (stream, filter string, err error) {
	switch kind {
	case conversation.ArrivalDecision:
		return in.names.Decisions, in.subj.DecisionsFor(conv), nil
	case conversation.ArrivalAnswer:
		return in.names.Answers, in.subj.AnswersFor(conv), nil
	case conversation.ArrivalResult:
		return in.names.Results, in.subj.ResultsFor(conv), nil
	}
	return "", "", fmt.Errorf("natsjs: watch: unknown arrival kind %q", kind)
}
