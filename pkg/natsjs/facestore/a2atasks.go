package facestore

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/offload-dev/offload/pkg/conversation"
	"github.com/offload-dev/offload/pkg/protocol"
)

// a2aTaskPre prefixes the key of each A2A task's record:
// a2a.tasks.<owner digest>.<task ULID>.
const a2aTaskPre = "a2a.tasks."

// a2aOwnerPre prefixes the key of each owner's index: a2a.owners.<owner
// digest>, the IDs of its tasks, oldest first, the last [a2aOwnerMax].
// A list reads it and each record by direct gets: agent serve's role
// may not make consumers on its bucket (a key listing is one).
const a2aOwnerPre = "a2a.owners."

// a2aOwnerMax bounds an owner's index: older tasks are kept but no
// longer listed.
const a2aOwnerMax = 1024

// a2aMsgPre prefixes the key of each owner's message mapped to the task
// it started: a2a.msgs.<owner digest>.<sha256(message ID)>.
const a2aMsgPre = "a2a.msgs."

// a2aIndexTries bounds the rereads of an owner's index that keeps
// changing under a create.
const a2aIndexTries = 16

// A2ATasks keeps the records of the A2A face's tasks (SPEC §17, package
// a2aface: which turn of which conversation a task is, its owner, how it
// ended) in agent serve's own bucket (natsjs.Names.ServiceBucket), so
// that any replica answers any request of any task. A record's key holds
// a digest of its owner (the name of the token that created it), and so
// does the owner's index of its tasks: a token reads and lists its own
// tasks only, by key, with direct gets (the serve role makes no consumer
// on its bucket). It implements a2aface.Store.
type A2ATasks struct {
	kv jetstream.KeyValue
}

// OpenA2ATasks ensures the service's bucket of cfg's prefix (as
// natsjs.Provision does, when the user may; else it must exist) and
// binds it.
func OpenA2ATasks(ctx context.Context, cfg Config) (*A2ATasks, error) {
	kv, _, err := bucket(ctx, cfg, "a2a tasks")
	if err != nil {
		return nil, err
	}
	return &A2ATasks{kv: kv}, nil
}

// ownerDigest names owner in keys.
func ownerDigest(owner string) string {
	sum := sha256.Sum256([]byte(owner))
	return hex.EncodeToString(sum[:16])
}

// ownerPre is the key prefix of owner's records.
func ownerPre(owner string) string { return a2aTaskPre + ownerDigest(owner) + "." }

// a2aKey is the key of owner's record id, or an error for an ID that is
// not a ULID (anything a client sends is checked before it is a key).
func a2aKey(owner, id string) (string, error) {
	if _, err := protocol.ParseID(id); err != nil {
		return "", fmt.Errorf("natsjs: a2a task %q: %w", id, conversation.ErrNotFound)
	}
	return ownerPre(owner) + id, nil
}

// Create stores owner's new record id (conversation.ErrConflict when it
// exists), then adds it to owner's index (compare-and-set: replicas
// creating tasks of one owner at once each add theirs).
func (a *A2ATasks) Create(ctx context.Context, owner, id string, data []byte) error {
	key, err := a2aKey(owner, id)
	if err != nil {
		return err
	}
	if _, err := a.kv.Create(ctx, key, data); errors.Is(err, jetstream.ErrKeyExists) {
		return fmt.Errorf("natsjs: a2a task %s: %w", id, conversation.ErrConflict)
	} else if err != nil {
		return fmt.Errorf("natsjs: a2a task %s: %w", id, err)
	}
	index := a2aOwnerPre + ownerDigest(owner)
	for range a2aIndexTries {
		ids, rev, err := a.index(ctx, owner)
		if err != nil {
			return err
		}
		ids = append(ids, id)
		if len(ids) > a2aOwnerMax {
			ids = ids[len(ids)-a2aOwnerMax:]
		}
		data, err := json.Marshal(ids)
		if err != nil {
			return err
		}
		if rev == 0 {
			_, err = a.kv.Create(ctx, index, data)
		} else {
			_, err = a.kv.Update(ctx, index, data, rev)
		}
		switch {
		case err == nil:
			return nil
		case errors.Is(err, jetstream.ErrKeyExists), errors.Is(err, jetstream.ErrKeyRevisionMismatch):
			continue // another task of owner indexed meanwhile: read again
		default:
			return fmt.Errorf("natsjs: a2a tasks' index: %w", err)
		}
	}
	return fmt.Errorf("natsjs: a2a tasks' index: %w (%d tries)", conversation.ErrConflict, a2aIndexTries)
}

// Message maps owner's message ID msg to task id with a create (the
// first replica's wins) and returns the task it maps to.
func (a *A2ATasks) Message(ctx context.Context, owner, msg, id string) (string, error) {
	sum := sha256.Sum256([]byte(msg))
	key := a2aMsgPre + ownerDigest(owner) + "." + hex.EncodeToString(sum[:])
	for range 3 {
		if _, err := a.kv.Create(ctx, key, []byte(id)); err == nil {
			return id, nil
		} else if !errors.Is(err, jetstream.ErrKeyExists) {
			return "", fmt.Errorf("natsjs: a2a message: %w", err)
		}
		e, err := a.kv.Get(ctx, key)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			continue // deleted meanwhile: create again
		}
		if err != nil {
			return "", fmt.Errorf("natsjs: a2a message: %w", err)
		}
		return string(e.Value()), nil
	}
	return "", fmt.Errorf("natsjs: a2a message: %w", conversation.ErrConflict)
}

// index returns owner's index and its revision (0: none yet).
func (a *A2ATasks) index(ctx context.Context, owner string) ([]string, uint64, error) {
	e, err := a.kv.Get(ctx, a2aOwnerPre+ownerDigest(owner))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, fmt.Errorf("natsjs: a2a tasks' index: %w", err)
	}
	var ids []string
	if err := json.Unmarshal(e.Value(), &ids); err != nil {
		return nil, 0, fmt.Errorf("natsjs: a2a tasks' index: %w", err)
	}
	return ids, e.Revision(), nil
}

// Get returns owner's record id and its revision (conversation.ErrNotFound
// for one owner does not have).
func (a *A2ATasks) Get(ctx context.Context, owner, id string) ([]byte, uint64, error) {
	key, err := a2aKey(owner, id)
	if err != nil {
		return nil, 0, err
	}
	e, err := a.kv.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, 0, fmt.Errorf("natsjs: a2a task %s: %w", id, conversation.ErrNotFound)
	}
	if err != nil {
		return nil, 0, fmt.Errorf("natsjs: a2a task %s: %w", id, err)
	}
	return e.Value(), e.Revision(), nil
}

// Update replaces owner's record id when its revision is still rev
// (conversation.ErrConflict when it changed since) and returns the new
// revision.
func (a *A2ATasks) Update(ctx context.Context, owner, id string, data []byte, rev uint64) (uint64, error) {
	key, err := a2aKey(owner, id)
	if err != nil {
		return 0, err
	}
	next, err := a.kv.Update(ctx, key, data, rev)
	if errors.Is(err, jetstream.ErrKeyRevisionMismatch) || errors.Is(err, jetstream.ErrKeyExists) {
		return 0, fmt.Errorf("natsjs: a2a task %s: %w", id, conversation.ErrConflict)
	}
	if err != nil {
		return 0, fmt.Errorf("natsjs: a2a task %s: %w", id, err)
	}
	return next, nil
}

// List calls fn with each of owner's records its index holds (the last
// a2aOwnerMax created), newest first.
func (a *A2ATasks) List(ctx context.Context, owner string, fn func(data []byte) error) error {
	ids, _, err := a.index(ctx, owner)
	if err != nil {
		return err
	}
	for i := len(ids) - 1; i >= 0; i-- {
		data, _, err := a.Get(ctx, owner, ids[i])
		if errors.Is(err, conversation.ErrNotFound) {
			continue
		}
		if err != nil {
			return err
		}
		if err := fn(data); err != nil {
			return err
		}
	}
	return nil
}

// a2aPushKey is the key of the index of the tasks with push
// notification configs: a JSON list of {owner, id}, the last
// [a2aPushMax], which each replica's sweep reads (direct gets, as the
// owners' indexes).
const a2aPushKey = "a2a.pushes"

// a2aPushMax bounds the tasks watched for push notifications at once.
const a2aPushMax = 1024

// pushRef names a task watched for push notifications: its owner and
// ID.
type pushRef struct {
	Owner string `json:"owner"`
	ID    string `json:"id"`
}

// Watched calls fn with the owner and ID of each task watched for push
// notifications, the oldest added first.
func (a *A2ATasks) Watched(ctx context.Context, fn func(owner, id string)) error {
	refs, _, err := a.pushes(ctx)
	for _, r := range refs {
		fn(r.Owner, r.ID)
	}
	return err
}

func (a *A2ATasks) pushes(ctx context.Context) ([]pushRef, uint64, error) {
	e, err := a.kv.Get(ctx, a2aPushKey)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, fmt.Errorf("natsjs: a2a pushes: %w", err)
	}
	var refs []pushRef
	if err := json.Unmarshal(e.Value(), &refs); err != nil {
		return nil, 0, fmt.Errorf("natsjs: a2a pushes: %w", err)
	}
	return refs, e.Revision(), nil
}

// Watch adds owner's task id to the tasks watched for push
// notifications (once; compare-and-set, as replicas add theirs at once).
func (a *A2ATasks) Watch(ctx context.Context, owner, id string) error {
	return a.changePushes(ctx, func(refs []pushRef) ([]pushRef, bool) {
		for _, r := range refs {
			if r.Owner == owner && r.ID == id {
				return refs, false
			}
		}
		refs = append(refs, pushRef{Owner: owner, ID: id})
		if len(refs) > a2aPushMax {
			refs = refs[len(refs)-a2aPushMax:]
		}
		return refs, true
	})
}

// Unwatch removes owner's task id from the tasks watched.
func (a *A2ATasks) Unwatch(ctx context.Context, owner, id string) error {
	return a.changePushes(ctx, func(refs []pushRef) ([]pushRef, bool) {
		out := refs[:0:0]
		for _, r := range refs {
			if r.Owner != owner || r.ID != id {
				out = append(out, r)
			}
		}
		return out, len(out) != len(refs)
	})
}

func (a *A2ATasks) changePushes(ctx context.Context, fn func([]pushRef) ([]pushRef, bool)) error {
	for range a2aIndexTries {
		refs, rev, err := a.pushes(ctx)
		if err != nil {
			return err
		}
		refs, changed := fn(refs)
		if !changed {
			return nil
		}
		data, err := json.Marshal(refs)
		if err != nil {
			return err
		}
		if rev == 0 {
			_, err = a.kv.Create(ctx, a2aPushKey, data)
		} else {
			_, err = a.kv.Update(ctx, a2aPushKey, data, rev)
		}
		switch {
		case err == nil:
			return nil
		case errors.Is(err, jetstream.ErrKeyExists), errors.Is(err, jetstream.ErrKeyRevisionMismatch):
			continue
		default:
			return fmt.Errorf("natsjs: a2a pushes: %w", err)
		}
	}
	return fmt.Errorf("natsjs: a2a pushes: %w (%d tries)", conversation.ErrConflict, a2aIndexTries)
}
