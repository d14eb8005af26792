// Package facestore keeps the records of agent serve's protocol faces in
// the service's bucket (natsjs.Names.ServiceBucket), so that any replica
// answers any request: the AG-UI threads mapped to conversations
// ([Threads], SPEC §18), the MCP face's tasks ([MCPTasks]) and the A2A
// face's tasks and push configurations ([A2ATasks], SPEC §17). Each
// record is bound to its owner (a digest of the token's name), written by
// create or compare-and-set, and listed through direct gets: agent
// serve's NATS role creates no consumer on the bucket.
package facestore

import (
	"context"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/offload-dev/offload/pkg/natsjs"
)

// Config says where the records are.
type Config struct {
	// JetStream is the JetStream context. Required.
	JetStream jetstream.JetStream
	// Provision names the service's stream and bucket (its Prefix) and
	// says how to create them when missing (replicas, memory storage).
	Provision natsjs.ProvisionOptions
}

// bucket ensures the service's bucket of cfg's prefix (as
// natsjs.Provision does, when the user may; else it must exist) and
// binds it; what names what is opened, for the errors.
func bucket(ctx context.Context, cfg Config, what string) (jetstream.KeyValue, natsjs.Names, error) {
	n := natsjs.NamesFor(cfg.Provision.Prefix)
	if cfg.JetStream == nil {
		return nil, n, fmt.Errorf("%w: %s: no JetStream", natsjs.ErrInvalidConfig, what)
	}
	kv, err := natsjs.EnsureBucket(ctx, cfg.JetStream, cfg.Provision, n.ServiceStream, n.ServiceBucket)
	return kv, n, err
}
