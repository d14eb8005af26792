package convstore

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/offload-dev/offload/pkg/links"
	"github.com/offload-dev/offload/pkg/natsjs"
)

// The keys of the signed links (SPEC §12) in the conversation store's
// bucket, beside conv.<id> and lease.<id>: the service's HMAC key, and a
// key per link used.
const (
	linkKeyKey = "serve.link-key"
	linkUsePre = "link."
)

// Links is what `agent serve`'s signed approve/deny links keep in the
// conversation store (SPEC §12): the HMAC key every replica signs them
// with, and which links were used, so that each is used once across
// replicas.
type Links struct {
	kv jetstream.KeyValue
}

var _ links.Store = (*Links)(nil)

// OpenLinks binds the conversation store's bucket of cfg's prefix.
func OpenLinks(ctx context.Context, cfg OpenConfig) (*Links, error) {
	if cfg.JetStream == nil {
		return nil, fmt.Errorf("%w: links: no JetStream", natsjs.ErrInvalidConfig)
	}
	kv, err := natsjs.BindBucket(ctx, cfg.JetStream, natsjs.NamesFor(cfg.Provision.Prefix).ConversationsBucket)
	if err != nil {
		return nil, err
	}
	return &Links{kv: kv}, nil
}

// Key returns the service's HMAC key, made (32 random bytes) by the first
// replica that asks.
func (l *Links) Key(ctx context.Context) ([]byte, error) {
	e, err := l.kv.Get(ctx, linkKeyKey)
	if err == nil {
		return e.Value(), nil
	}
	if !errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, fmt.Errorf("natsjs: the links' key: %w", err)
	}
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		return nil, err
	}
	if _, err := l.kv.Create(ctx, linkKeyKey, key); errors.Is(err, jetstream.ErrKeyExists) {
		return l.Key(ctx) // made meanwhile by another replica
	} else if err != nil {
		return nil, fmt.Errorf("natsjs: the links' key: %w", err)
	}
	return key, nil
}

// Use records that link id is used: links.ErrUsed when it was before (a
// create of its key: once across replicas).
func (l *Links) Use(ctx context.Context, id string) error {
	_, err := l.kv.Create(ctx, linkUsePre+id, []byte(time.Now().UTC().Format(time.RFC3339Nano)))
	if errors.Is(err, jetstream.ErrKeyExists) {
		return links.ErrUsed
	}
	if err != nil {
		return fmt.Errorf("natsjs: use link %s: %w", id, err)
	}
	return nil
}
