package convstore

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/offload-dev/offload/pkg/conversation"
	"github.com/offload-dev/offload/pkg/metrics"
	"github.com/offload-dev/offload/pkg/natsjs"
)

// OpenConfig configures [Open].
type OpenConfig struct {
	// JetStream is the JetStream context. Required.
	JetStream jetstream.JetStream
	// Provision names the streams and buckets (its Prefix) and says how
	// to create them when missing (replicas, memory storage).
	Provision natsjs.ProvisionOptions
	// Metrics, if set, counts the messages the inbox refuses and the
	// announcements the approvals stream refuses at a limit.
	Metrics *metrics.Agent
	// Logger receives the store's and the inbox's logs. Defaults to
	// discarding them.
	Logger *slog.Logger
	// QuietDuplicates logs the inbox's refusals of duplicates at Info
	// (see [InboxConfig.QuietDuplicates]).
	QuietDuplicates bool
	// Identities authenticates the approvals of calls that need a quorum
	// (see [InboxConfig.Identities]).
	Identities *Identities
	// LeaseTTL is the store's lease (see [Config.LeaseTTL]).
	LeaseTTL time.Duration
}

// Conversations is what an agent process uses of the stored
// conversations: the [Store], the [Inbox] of what arrived for them, the
// [Announcer] of approvals and the [Publisher] of decisions and answers,
// all of one prefix.
type Conversations struct {
	Store     *Store
	Inbox     *Inbox
	Announcer *Announcer
	Publisher *Publisher
}

// Open ensures the streams and buckets of the conversations (the store's,
// and those the inbox reads and the announcer writes: approvals,
// decisions, answers, results), as natsjs.Provision does, and opens them.
// The inbox bounds payloads by the connection's max payload.
func Open(ctx context.Context, cfg OpenConfig) (*Conversations, error) {
	js, prefix := cfg.JetStream, cfg.Provision.Prefix
	if js == nil {
		return nil, fmt.Errorf("%w: conversations: no JetStream", natsjs.ErrInvalidConfig)
	}
	if err := ensureInboxStreams(ctx, js, cfg.Provision); err != nil {
		return nil, err
	}
	store, err := New(ctx, Config{JetStream: js, Provision: cfg.Provision, Logger: cfg.Logger, LeaseTTL: cfg.LeaseTTL})
	if err != nil {
		return nil, err
	}
	maxPayload := 0
	if nc := js.Conn(); nc != nil {
		maxPayload = int(nc.MaxPayload())
	}
	inbox, err := NewInbox(InboxConfig{JetStream: js, Prefix: prefix, MaxPayload: maxPayload, Metrics: cfg.Metrics,
		Logger: cfg.Logger, QuietDuplicates: cfg.QuietDuplicates, Identities: cfg.Identities})
	if err != nil {
		return nil, err
	}
	announcer := NewAnnouncer(js, prefix)
	announcer.metrics = cfg.Metrics
	return &Conversations{Store: store, Inbox: inbox, Announcer: announcer, Publisher: NewPublisher(js, prefix)}, nil
}

// Load returns the stored conversation id with what arrived for it in the
// streams since its checkpoint, recorded in the copy only (nothing is
// saved): its state as a resume would find it. An unknown conversation is
// an error wrapping conversation.ErrNotFound.
func (c *Conversations) Load(ctx context.Context, id string) (*conversation.State, error) {
	st, _, err := c.Store.Load(ctx, id)
	if err != nil {
		return nil, err
	}
	if st.Pending != nil {
		if _, err := c.Inbox.Collect(ctx, st); err != nil {
			return nil, fmt.Errorf("read decisions and answers: %w", err)
		}
	}
	return st, nil
}
