package natsjs

import (
	"context"
	"fmt"
	"io/fs"

	"github.com/nats-io/nats.go/jetstream"
)

// WakeConsumerName is the durable name of the wake consumers (SPEC §11):
// one on each of the results, decisions and answers streams, shared by
// every `agent serve` replica, so that each message reaches one replica.
const WakeConsumerName = "wake"

// WakeConsumerConfig returns the wake consumer configuration of the
// consumers/wake.json definition: durable [WakeConsumerName], the whole
// stream, headers only (a replica routes a message by its subject and
// never transfers its body); opts.AckWait, when set, replaces its ack
// wait.
func WakeConsumerConfig(opts ProvisionOptions) (jetstream.ConsumerConfig, error) {
	return sharedConsumerConfig(opts, "consumers/wake.json", WakeConsumerName, true)
}

// sharedConsumerConfig reads the definition file of a consumer shared by
// every `agent serve` replica (the wake and notification consumers):
// durable name durable, no filter subject, headers only or whole messages
// as headersOnly says; opts.MemoryStorage and opts.AckWait applied.
func sharedConsumerConfig(opts ProvisionOptions, file, durable string, headersOnly bool) (jetstream.ConsumerConfig, error) {
	data, err := fs.ReadFile(opts.fsys(), file)
	if err != nil {
		return jetstream.ConsumerConfig{}, fmt.Errorf("%w: %w", ErrInvalidDefinition, err)
	}
	var cfg jetstream.ConsumerConfig
	if err := strictUnmarshal(file, data, &cfg); err != nil {
		return jetstream.ConsumerConfig{}, err
	}
	if cfg.Durable != durable || cfg.FilterSubject != "" || cfg.HeadersOnly != headersOnly {
		return jetstream.ConsumerConfig{}, fmt.Errorf("%w: %s: want durable_name %q, no filter_subject and headers_only %v, have %q, %q and %v",
			ErrInvalidDefinition, file, durable, headersOnly, cfg.Durable, cfg.FilterSubject, cfg.HeadersOnly)
	}
	if opts.MemoryStorage {
		cfg.MemoryStorage = true
	}
	if opts.AckWait > 0 {
		cfg.AckWait = opts.AckWait
	}
	return cfg, nil
}

// WakeStreams returns the streams whose messages can wake a conversation:
// decisions, answers, results and the wake markers, in that order.
func WakeStreams(prefix string) []string {
	n := NamesFor(prefix)
	return []string{n.Decisions, n.Answers, n.Results, n.Wake}
}

// WakeSubject returns the subject of conversation conv's wake marker,
// <prefix>.wake.<conv>.
func WakeSubject(prefix, conv string) string {
	if prefix == "" {
		prefix = defPrefix
	}
	return prefix + ".wake." + conv
}

// EnsureWakeConsumers ensures [WakeStreams] (and the events stream of
// `agent serve`) and the wake consumer on each
// (created when missing, updated or refused as [EnsureTaskConsumer] does)
// and returns them in the same order.
func EnsureWakeConsumers(ctx context.Context, js jetstream.JetStream, opts ProvisionOptions) ([]jetstream.Consumer, error) {
	want, err := WakeConsumerConfig(opts)
	if err != nil {
		return nil, err
	}
	streams := WakeStreams(opts.prefix())
	if err := EnsureStreams(ctx, js, opts, append(streams, NamesFor(opts.prefix()).Events)...); err != nil {
		return nil, err
	}
	var out []jetstream.Consumer
	for _, stream := range streams {
		c, err := ensureConsumer(ctx, js, stream, "", want)
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, nil
}
