package facestore

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/offload-dev/offload/pkg/conversation"
	"github.com/offload-dev/offload/pkg/natsjs"
	"github.com/offload-dev/offload/pkg/natsjs/internal/direct"
	"github.com/offload-dev/offload/pkg/protocol"
)

// mcpTaskPre prefixes the key of each MCP task: mcp.tasks.<owner>.<task>.
const mcpTaskPre = "mcp.tasks."

// MCPTasks keeps the MCP face's tasks (SPEC §17) in agent serve's own
// bucket (natsjs.Names.ServiceBucket), one record a task, keyed by its
// owner (the digest of the token that created it) and its ID: any
// replica answers a task's requests, and a task is found only under the
// owner that created it. The records are the face's own bytes.
type MCPTasks struct {
	kv      jetstream.KeyValue
	names   natsjs.Names
	batches *direct.Batches
}

// OpenMCPTasks ensures the service's bucket of cfg's prefix (as
// natsjs.Provision does, when the user may; else it must exist) and
// binds it.
func OpenMCPTasks(ctx context.Context, cfg Config) (*MCPTasks, error) {
	kv, n, err := bucket(ctx, cfg, "mcp tasks")
	if err != nil {
		return nil, err
	}
	return &MCPTasks{kv: kv, names: n, batches: direct.NewBatches(cfg.JetStream.Conn())}, nil
}

// mcpTaskKey is the key of task id of owner; an error when either is not
// a key token (owner: hex; id: a ULID).
func mcpTaskKey(owner, id string) (string, error) {
	if !hexOwner(owner) {
		return "", fmt.Errorf("%w: mcp task owner %q", natsjs.ErrInvalidConfig, owner)
	}
	if _, err := protocol.ParseID(id); err != nil {
		return "", fmt.Errorf("%w: mcp task %s", conversation.ErrNotFound, id)
	}
	return mcpTaskPre + owner + "." + id, nil
}

// hexOwner reports whether owner is an owner's key: hex, 16 to 64 digits.
func hexOwner(owner string) bool {
	if len(owner) < 16 || len(owner) > 64 {
		return false
	}
	_, err := hex.DecodeString(owner)
	return err == nil
}

// Create stores rec as task id of owner, once: it returns when the record
// is stored (an error when the task exists).
func (m *MCPTasks) Create(ctx context.Context, owner, id string, rec []byte) error {
	key, err := mcpTaskKey(owner, id)
	if err != nil {
		return err
	}
	if _, err := m.kv.Create(ctx, key, rec); err != nil {
		return fmt.Errorf("natsjs: create mcp task %s: %w", id, err)
	}
	return nil
}

// Put replaces the record of task id of owner.
func (m *MCPTasks) Put(ctx context.Context, owner, id string, rec []byte) error {
	key, err := mcpTaskKey(owner, id)
	if err != nil {
		return err
	}
	if _, err := m.kv.Put(ctx, key, rec); err != nil {
		return fmt.Errorf("natsjs: put mcp task %s: %w", id, err)
	}
	return nil
}

// Get returns the record of task id of owner; conversation.ErrNotFound
// when owner has no such task (another owner's included).
func (m *MCPTasks) Get(ctx context.Context, owner, id string) ([]byte, error) {
	key, err := mcpTaskKey(owner, id)
	if err != nil {
		return nil, err
	}
	e, err := m.kv.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, fmt.Errorf("%w: mcp task %s", conversation.ErrNotFound, id)
	}
	if err != nil {
		return nil, fmt.Errorf("natsjs: mcp task %s: %w", id, err)
	}
	return e.Value(), nil
}

// List calls fn with each task of owner and its record, until fn returns
// false.
func (m *MCPTasks) List(ctx context.Context, owner string, fn func(id string, rec []byte) bool) error {
	if !hexOwner(owner) {
		return fmt.Errorf("%w: mcp task owner %q", natsjs.ErrInvalidConfig, owner)
	}
	// Read by batched direct gets, as every read of the service's bucket
	// (agent serve's NATS role creates no consumer on it): the latest
	// record of each key, its deletes skipped.
	n := m.names
	filter := "$KV." + n.ServiceBucket + "." + mcpTaskPre + owner + ".*"
	recs := map[string][]byte{}
	var order []string
	for from := uint64(1); ; {
		msgs, more, err := m.batches.Next(ctx, n.ServiceStream, filter, from, direct.BatchSize)
		if err != nil {
			return fmt.Errorf("natsjs: list mcp tasks: %w", err)
		}
		for _, msg := range msgs {
			id := msg.Subject[strings.LastIndexByte(msg.Subject, '.')+1:]
			if _, seen := recs[id]; !seen {
				order = append(order, id)
			}
			recs[id] = msg.Data
			if msg.Deleted() {
				recs[id] = nil
			}
			from = msg.Seq + 1
		}
		if !more || len(msgs) == 0 {
			break
		}
	}
	for _, id := range order {
		if recs[id] != nil && !fn(id, recs[id]) {
			return nil
		}
	}
	return nil
}
