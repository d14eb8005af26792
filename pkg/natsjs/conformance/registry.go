package conformance

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/offload-dev/offload/pkg/natsjs"
)

// maxAhead bounds how far ahead an entry's expires_at may lie: an entry
// valid longer than the bucket keeps it would outlive its worker in the
// agent's view.
const maxAhead = 2 * natsjs.RegistryTTL

// kvUpdate is one registry value seen (nil entry: the initial values are
// all delivered).
type kvUpdate struct {
	entry jetstream.KeyValueEntry
	at    time.Time
}

// registryWatch records the registry entries of the tool, from the ones
// stored when the check starts on.
type registryWatch struct {
	w       jetstream.KeyWatcher
	updates *events[kvUpdate]
	done    chan struct{}
}

func watchRegistry(ctx context.Context, js jetstream.JetStream, bucket, toolName string) (*registryWatch, error) {
	kv, err := js.KeyValue(ctx, bucket)
	if err != nil {
		return nil, err
	}
	// The watch outlives ctx's callers only until stop.
	w, err := kv.Watch(context.WithoutCancel(ctx), toolName+".*", jetstream.IgnoreDeletes())
	if err != nil {
		return nil, err
	}
	r := &registryWatch{w: w, updates: newEvents[kvUpdate](), done: make(chan struct{})}
	go func() {
		defer close(r.done)
		for e := range w.Updates() {
			r.updates.add(kvUpdate{entry: e, at: time.Now()})
		}
	}()
	return r, nil
}

func (r *registryWatch) stop() {
	_ = r.w.Stop()
	<-r.done
}

// current waits until the values stored when the watch started are all
// delivered and, when since is set, one was written since, and returns the
// latest value of every key (written since since, when it is set: the
// entries of a worker the kit started).
func (r *registryWatch) current(ctx context.Context, since time.Time) []jetstream.KeyValueEntry {
	items, _ := r.updates.wait(ctx, func(items []kvUpdate) bool {
		marker, fresh := false, since.IsZero()
		for _, u := range items {
			switch {
			case u.entry == nil:
				marker = true
			case !u.at.Before(since):
				fresh = true
			}
		}
		return marker && fresh
	})
	latest := map[string]jetstream.KeyValueEntry{}
	for _, u := range items {
		if u.entry != nil && !u.at.Before(since) {
			latest[u.entry.Key()] = u.entry
		}
	}
	out := make([]jetstream.KeyValueEntry, 0, len(latest))
	for _, e := range latest {
		out = append(out, e)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key() < out[j].Key() })
	return out
}

// checkEntry checks one registry value as the agent reads it, and more
// strictly: what the agent would skip, and what would mislead it.
func checkEntry(e jetstream.KeyValueEntry, now time.Time) (natsjs.RegistryEntry, error) {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(e.Value(), &raw); err != nil {
		return natsjs.RegistryEntry{}, fmt.Errorf("not a JSON object: %w", err)
	}
	entry, err := natsjs.ParseRegistryEntry(e.Key(), e.Value())
	if err != nil {
		return entry, errors.New(strings.TrimPrefix(err.Error(), "natsjs: "))
	}
	switch {
	case entry.ExpiresAt.IsZero():
		return entry, errors.New("no expires_at (RFC 3339): the agent skips the entry")
	case !entry.ExpiresAt.After(now):
		return entry, fmt.Errorf("expires_at %s is past: the agent skips the entry", entry.ExpiresAt.Format(time.RFC3339Nano))
	case entry.ExpiresAt.After(now.Add(maxAhead)):
		return entry, fmt.Errorf("expires_at %s is more than %s ahead: write now + %s and refresh it", entry.ExpiresAt.Format(time.RFC3339Nano), maxAhead, natsjs.RegistryTTL)
	}
	if p, ok := raw["parameters"]; ok && string(p) != "null" {
		var schema map[string]any
		if err := json.Unmarshal(p, &schema); err != nil {
			return entry, fmt.Errorf("parameters is not a JSON Schema object: %s", p)
		}
		if t, ok := schema["type"]; ok && t != "object" {
			return entry, fmt.Errorf("parameters' type is %v: a tool's arguments are an object", t)
		}
	}
	if entry.Retries != nil && *entry.Retries < 0 {
		return entry, fmt.Errorf("retries %d is negative", *entry.Retries)
	}
	if _, ok := raw["timeout"]; ok && !(entry.Timeout > 0) {
		return entry, fmt.Errorf("timeout %v is not a positive number of seconds: the agent bounds background calls by its own default instead", entry.Timeout)
	}
	return entry, nil
}

func (c *checker) registryEntry(ctx context.Context) Outcome {
	wctx, cancel := context.WithTimeout(ctx, c.cfg.Timeout)
	defer cancel()
	var since time.Time
	if c.proc != nil {
		since = c.proc.started
	}
	entries := c.reg.current(wctx, since)
	if len(entries) == 0 {
		return fail("no entry under key %s.<worker-id> in the bucket %s", c.cfg.Tool, c.names.RegistryBucket)
	}
	c.first = entries
	now := time.Now()
	var bad []string
	for _, e := range entries {
		entry, err := checkEntry(e, now)
		if err != nil {
			bad = append(bad, fmt.Sprintf("%s: %v (%s)", e.Key(), err, e.Value()))
			continue
		}
		if c.entry == nil {
			c.entry = &entry
		}
	}
	if len(bad) > 0 {
		return fail("%s", strings.Join(bad, "; "))
	}
	return ok()
}

// registryRefresh checks that every entry seen at the start was written
// again, with a later expires_at, before it expired.
func (c *checker) registryRefresh(ctx context.Context) Outcome {
	first := c.first
	if len(first) == 0 {
		return fail("no entry to watch (see %s)", RuleRegistryEntry)
	}
	var missing []string
	for _, e := range first {
		entry, err := natsjs.ParseRegistryEntry(e.Key(), e.Value())
		if err != nil || entry.ExpiresAt.IsZero() {
			missing = append(missing, e.Key()+": unreadable (see "+RuleRegistryEntry+")")
			continue
		}
		deadline := entry.ExpiresAt
		if now := time.Now(); deadline.Before(now) {
			deadline = now
		}
		wctx, cancel := context.WithDeadline(ctx, deadline.Add(time.Second))
		_, refreshed := c.reg.updates.wait(wctx, func(items []kvUpdate) bool {
			for _, u := range items {
				if u.entry == nil || u.entry.Key() != e.Key() || u.entry.Revision() <= e.Revision() {
					continue
				}
				if next, err := natsjs.ParseRegistryEntry(u.entry.Key(), u.entry.Value()); err == nil && next.ExpiresAt.After(entry.ExpiresAt) {
					return true
				}
			}
			return false
		})
		cancel()
		if !refreshed {
			missing = append(missing, fmt.Sprintf("%s not written again with a later expires_at before its expires_at %s", e.Key(), entry.ExpiresAt.Format(time.RFC3339Nano)))
		}
	}
	if len(missing) > 0 {
		return fail("%s", strings.Join(missing, "; "))
	}
	return ok()
}
