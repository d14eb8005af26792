package convstore

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/offload-dev/offload/pkg/links"
	"github.com/offload-dev/offload/pkg/natsjs"
	"github.com/offload-dev/offload/pkg/natsjs/internal/direct"
)

// The keys of agent serve's own bucket (natsjs.Names.ServiceBucket,
// issue 37), which the roles' permissions separate: the serve role reads
// and writes them all, the agent role may read decisionPublicKey alone
// (by a direct get of its subject), no other role any.
const (
	// decisionPrivateKey is the seed of the Ed25519 key that signs the
	// decisions the service's faces publish.
	decisionPrivateKey = "decisions.private"
	// decisionPublicKey is its public half, which agents verify with.
	decisionPublicKey = natsjs.DecisionPublicKey
	// linkKeyKey is the HMAC key of the signed links (SPEC §12).
	linkKeyKey = "links.key"
	// linkUsePre prefixes the key of each link used.
	linkUsePre = "links.used."
	// legacyLinkKey is where the links' key was kept before, in the
	// conversation store's bucket, which every agent reads: deleted.
	legacyLinkKey = "serve.link-key"
)

// readKeyTimeout bounds the read of the decision key's public half.
const readKeyTimeout = 5 * time.Second

// linkUseTTL is how long a link's use is kept: longer than any link
// lives (the inbox's at most 7 days).
const linkUseTTL = 30 * 24 * time.Hour

// ErrNoDecisionKey is returned by [ReadDecisionKey] when no service has
// made its decision key yet (agent provision or agent serve makes it).
var ErrNoDecisionKey = errors.New("natsjs: the service's decision key is not made yet (agent provision or agent serve makes it)")

// ServiceKeys are agent serve's keys, made once across replicas.
type ServiceKeys struct {
	// Decisions signs the decisions the service's faces publish.
	Decisions ed25519.PrivateKey
	// Links keeps the links' key and uses.
	Links *Links
}

// EnsureServiceKeys ensures the service bucket of cfg's prefix (as
// natsjs.Provision does) and returns the service's keys, each made by
// the first process that asks (a create: once across replicas), the
// decision key's public half written where agents read it; the links'
// key of an earlier release, kept in the conversation store where every
// agent read it, is deleted. agent provision (admin) and agent serve
// (the serve role) call it.
func EnsureServiceKeys(ctx context.Context, cfg OpenConfig) (*ServiceKeys, error) {
	l, err := OpenLinks(ctx, cfg)
	if err != nil {
		return nil, err
	}
	seed, err := l.makeOnce(ctx, decisionPrivateKey, ed25519.SeedSize)
	if err != nil {
		return nil, fmt.Errorf("natsjs: the service's decision key: %w", err)
	}
	priv := ed25519.NewKeyFromSeed(seed)
	pub, _ := priv.Public().(ed25519.PublicKey)
	if e, err := l.kv.Get(ctx, decisionPublicKey); err != nil || !pub.Equal(ed25519.PublicKey(e.Value())) {
		if _, err := l.kv.Put(ctx, decisionPublicKey, pub); err != nil {
			return nil, fmt.Errorf("natsjs: the service's decision key's public half: %w", err)
		}
	}
	if _, err := l.Key(ctx); err != nil {
		return nil, err
	}
	l.deleteLegacy(ctx, cfg)
	return &ServiceKeys{Decisions: priv, Links: l}, nil
}

// ReadDecisionKey returns the public half of the service's decision key
// of prefix, read by a direct get of its key alone (what the agent role
// may read of the service's bucket); ErrNoDecisionKey when none is made.
func ReadDecisionKey(ctx context.Context, nc *nats.Conn, prefix string) (ed25519.PublicKey, error) {
	n := natsjs.NamesFor(prefix)
	ctx, cancel := context.WithTimeout(ctx, readKeyTimeout) // a refused request gets no reply
	defer cancel()
	m, err := direct.Last(ctx, nc, n.ServiceStream, "$KV."+n.ServiceBucket+"."+decisionPublicKey)
	switch {
	case err != nil:
		return nil, err
	case m == nil || m.Header.Get("KV-Operation") != "":
		return nil, ErrNoDecisionKey
	case len(m.Data) != ed25519.PublicKeySize:
		return nil, fmt.Errorf("natsjs: the service's decision key: %d bytes, not an Ed25519 public key", len(m.Data))
	}
	return ed25519.PublicKey(m.Data), nil
}

// Links is what `agent serve`'s signed approve/deny links keep in the
// service's bucket (SPEC §12): the HMAC key every replica signs them
// with, and which links were used, so that each is used once across
// replicas.
type Links struct {
	kv jetstream.KeyValue
}

var _ links.Store = (*Links)(nil)

// OpenLinks ensures the service's bucket of cfg's prefix (as
// natsjs.Provision does, when the user may; else it must exist) and
// binds it.
func OpenLinks(ctx context.Context, cfg OpenConfig) (*Links, error) {
	if cfg.JetStream == nil {
		return nil, fmt.Errorf("%w: links: no JetStream", natsjs.ErrInvalidConfig)
	}
	n := natsjs.NamesFor(cfg.Provision.Prefix)
	kv, err := natsjs.EnsureBucket(ctx, cfg.JetStream, cfg.Provision, n.ServiceStream, n.ServiceBucket)
	if err != nil {
		return nil, err
	}
	return &Links{kv: kv}, nil
}

// Key returns the service's HMAC key of the links, made (32 random
// bytes) by the first replica that asks.
func (l *Links) Key(ctx context.Context) ([]byte, error) {
	key, err := l.makeOnce(ctx, linkKeyKey, 32)
	if err != nil {
		return nil, fmt.Errorf("natsjs: the links' key: %w", err)
	}
	return key, nil
}

// makeOnce returns the value of key, made of size random bytes by the
// first process that asks (a create: once across replicas).
func (l *Links) makeOnce(ctx context.Context, key string, size int) ([]byte, error) {
	e, err := l.kv.Get(ctx, key)
	if err == nil {
		if len(e.Value()) != size {
			return nil, fmt.Errorf("%s holds %d bytes, want %d", key, len(e.Value()), size)
		}
		return e.Value(), nil
	}
	if !errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, err
	}
	v := make([]byte, size)
	if _, err := rand.Read(v); err != nil {
		return nil, err
	}
	if _, err := l.kv.Create(ctx, key, v); errors.Is(err, jetstream.ErrKeyExists) {
		return l.makeOnce(ctx, key, size) // made meanwhile by another replica
	} else if err != nil {
		return nil, err
	}
	return v, nil
}

// deleteLegacy deletes the links' key of an earlier release from the
// conversation store's bucket, if it is there (best effort: the key
// signs nothing any more).
func (l *Links) deleteLegacy(ctx context.Context, cfg OpenConfig) {
	kv, err := natsjs.BindBucket(ctx, cfg.JetStream, natsjs.NamesFor(cfg.Provision.Prefix).ConversationsBucket)
	if err != nil {
		return
	}
	if _, err := kv.Get(ctx, legacyLinkKey); err == nil {
		_ = kv.Delete(ctx, legacyLinkKey)
	}
}

// Use records that link id is used: links.ErrUsed when it was before (a
// create of its key: once across replicas).
func (l *Links) Use(ctx context.Context, id string) error {
	_, err := l.kv.Create(ctx, linkUsePre+id, []byte(time.Now().UTC().Format(time.RFC3339Nano)), jetstream.KeyTTL(linkUseTTL))
	if errors.Is(err, jetstream.ErrKeyExists) {
		return links.ErrUsed
	}
	if err != nil {
		return fmt.Errorf("natsjs: use link %s: %w", id, err)
	}
	return nil
}
