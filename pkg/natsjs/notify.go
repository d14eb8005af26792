package natsjs

import (
	"context"
	"fmt"
	"io/fs"

	"github.com/nats-io/nats.go/jetstream"
)

// NotifyConsumerName is the durable name of the notification consumer
// (SPEC §12, `agent serve --notify`): one on the approvals stream, shared
// by every `agent serve` replica that notifies, so that each announcement
// and each resolution is sent by one replica.
const NotifyConsumerName = "notify"

// NotifyConsumerConfig returns the notification consumer configuration of
// the consumers/notify.json definition: durable [NotifyConsumerName], the
// approvals stream from the consumer's creation on (deliver_policy new:
// the announcements stored before the first replica that notifies are not
// sent), whole messages; opts.AckWait, when set, replaces its ack wait.
func NotifyConsumerConfig(opts ProvisionOptions) (jetstream.ConsumerConfig, error) {
	const file = "consumers/notify.json"
	data, err := fs.ReadFile(opts.fsys(), file)
	if err != nil {
		return jetstream.ConsumerConfig{}, fmt.Errorf("%w: %w", ErrInvalidDefinition, err)
	}
	var cfg jetstream.ConsumerConfig
	if err := strictUnmarshal(file, data, &cfg); err != nil {
		return jetstream.ConsumerConfig{}, err
	}
	if cfg.Durable != NotifyConsumerName || cfg.FilterSubject != "" || cfg.HeadersOnly {
		return jetstream.ConsumerConfig{}, fmt.Errorf("%w: %s: want durable_name %q, no filter_subject and whole messages, have %q, %q and headers_only %v",
			ErrInvalidDefinition, file, NotifyConsumerName, cfg.Durable, cfg.FilterSubject, cfg.HeadersOnly)
	}
	if opts.MemoryStorage {
		cfg.MemoryStorage = true
	}
	if opts.AckWait > 0 {
		cfg.AckWait = opts.AckWait
	}
	return cfg, nil
}

// EnsureNotifyConsumer ensures the approvals stream and the notification
// consumer on it (created when missing, updated or refused as
// [EnsureTaskConsumer] does).
func EnsureNotifyConsumer(ctx context.Context, js jetstream.JetStream, opts ProvisionOptions) (jetstream.Consumer, error) {
	want, err := NotifyConsumerConfig(opts)
	if err != nil {
		return nil, err
	}
	stream := NamesFor(opts.prefix()).Approvals
	if err := EnsureStreams(ctx, js, opts, stream); err != nil {
		return nil, err
	}
	return ensureConsumer(ctx, js, stream, "", want)
}
