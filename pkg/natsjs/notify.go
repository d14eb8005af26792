package natsjs

import (
	"context"

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
	return sharedConsumerConfig(opts, "consumers/notify.json", NotifyConsumerName, false)
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
