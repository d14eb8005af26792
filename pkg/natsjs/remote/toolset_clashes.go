package remote

import (
	"context"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/offload-dev/offload/pkg/natsjs"
	"github.com/offload-dev/offload/pkg/tool"
)

// Clash is a registry entry that advertises a tool otherwise than the
// agent's policy for it (ToolsetConfig.Policies, SPEC §5.4): with less
// approval, another description or schema than the pinned ones, or under
// the name of a tool the agent declares external. The policy applies: the
// entry's tool is offered held to it, or, for an external name, not at
// all.
type Clash struct {
	// Key is the registry key, <tool>.<worker-id>.
	Key string
	// Revision is the entry's revision in the registry bucket.
	Revision uint64
	// Worker is the worker the entry names (as it claims it).
	Worker string
	// Differences say how the entry departs from the policy.
	Differences []tool.Difference
}

// Reason returns the differences as one line.
func (c Clash) Reason() string { return tool.JoinDifferences(c.Differences) }

// String names the entry and how it clashes: "KEY (REASON)".
func (c Clash) String() string { return c.Key + " (" + c.Reason() + ")" }

// clash is a Clash with the time its entry expires.
type clash struct {
	Clash
	expires time.Time
}

// Clashes returns the registry entries that clash with the agent's
// policies now, sorted by key (those of tools outside the filter are left
// out, unless the agent declares the tool external: such an entry is an
// attempt to answer for a person).
func (r *Toolset) Clashes() []Clash {
	now := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []Clash
	for _, key := range slices.Sorted(maps.Keys(r.clashes)) {
		c := r.clashes[key]
		if !c.expires.After(now) {
			delete(r.clashes, key)
			continue
		}
		if r.clashWantedLocked(key) {
			out = append(out, c.Clash)
		}
	}
	return out
}

// clashLocked checks the entry under key, at revision rev, against the
// agent's policy for its tool. A departure is recorded, logged as a
// warning (one level lower for a tool outside the filter) and counted,
// once per revision since an update replaces the record. It reports
// whether the entry is withheld: the agent declares its tool external.
func (r *Toolset) clashLocked(key string, rev uint64, e natsjs.RegistryEntry) (withheld bool) {
	p, ok := r.cfg.Policies[e.Name]
	if !ok {
		return false
	}
	diffs := p.Diff(e.Def())
	if len(diffs) == 0 {
		return false
	}
	c := clash{Clash: Clash{Key: key, Revision: rev, Worker: e.Worker, Differences: diffs}, expires: e.ExpiresAt}
	r.clashes[key] = c
	level := slog.LevelWarn
	if !r.clashWantedLocked(key) {
		level = slog.LevelInfo
	}
	for _, d := range diffs {
		if r.cfg.Metrics != nil {
			r.cfg.Metrics.RegistryClash(e.Name, d.Field)
		}
	}
	r.log.Log(context.Background(), level, "registry entry clashes with the agent's policy; the policy applies",
		slog.String("key", key), slog.Uint64("revision", rev), slog.String("worker", e.Worker), slog.String("difference", c.Reason()))
	return p.External
}

// clashWantedLocked reports whether the clash of a registry key matters
// here: its tool passes the filter, or the agent declares it external.
func (r *Toolset) clashWantedLocked(key string) bool {
	if r.wantedLocked(key) {
		return true
	}
	name, _, _ := strings.Cut(key, ".")
	return r.cfg.Policies[name].External
}

// preferLocked reports whether the entry under key serves its tool rather
// than the one under other: an entry without a clash before one with, then
// the smallest key.
func (r *Toolset) preferLocked(key, other string) bool {
	_, kc := r.clashes[key]
	_, oc := r.clashes[other]
	if kc != oc {
		return oc
	}
	return key < other
}
