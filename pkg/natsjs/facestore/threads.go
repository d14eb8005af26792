package facestore

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/offload-dev/offload/pkg/protocol"
)

// threadPre prefixes the key of each thread mapped to a conversation.
const threadPre = "agui.threads."

// Threads maps the thread IDs of AG-UI clients that are not ULIDs (the
// UUIDs they generate) to conversations (SPEC §18), in agent serve's own
// bucket (natsjs.Names.ServiceBucket), so that any replica continues the
// thread's conversation: the mapping is made once across replicas (a
// create) and kept as long as the bucket.
type Threads struct {
	kv jetstream.KeyValue
}

// OpenThreads ensures the service's bucket of cfg's prefix (as
// natsjs.Provision does, when the user may; else it must exist) and
// binds it.
func OpenThreads(ctx context.Context, cfg Config) (*Threads, error) {
	kv, _, err := bucket(ctx, cfg, "threads")
	if err != nil {
		return nil, err
	}
	return &Threads{kv: kv}, nil
}

// Conversation returns the conversation ID thread of agent is mapped to,
// mapping it to a new one when it is not yet (the first replica that
// asks decides it). The key is a digest of the agent and the thread: any
// text a client sends is a valid key.
func (t *Threads) Conversation(ctx context.Context, agent, thread string) (string, error) {
	sum := sha256.Sum256([]byte(agent + "\x00" + thread))
	key := threadPre + hex.EncodeToString(sum[:])
	for range 3 {
		e, err := t.kv.Get(ctx, key)
		if err == nil {
			id := string(e.Value())
			if _, perr := protocol.ParseID(id); perr != nil {
				return "", fmt.Errorf("natsjs: thread %q maps to %q: %w", thread, id, perr)
			}
			return id, nil
		}
		if !errors.Is(err, jetstream.ErrKeyNotFound) {
			return "", fmt.Errorf("natsjs: thread %q: %w", thread, err)
		}
		id := protocol.NewID()
		if _, err := t.kv.Create(ctx, key, []byte(id)); err == nil {
			return id, nil
		} else if !errors.Is(err, jetstream.ErrKeyExists) {
			return "", fmt.Errorf("natsjs: map thread %q: %w", thread, err)
		}
		// Mapped meanwhile by another replica: read its mapping.
	}
	return "", fmt.Errorf("natsjs: thread %q: its mapping keeps changing", thread)
}
