package remote

import (
	"context"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"time"
)

// SkippedEntry is a registry entry that a [Toolset] does not offer,
// and why (SPEC §5.4): malformed, naming another tool than its key, without
// expires_at or past it, or with a definition no tool can be built from.
type SkippedEntry struct {
	// Key is the registry key, <tool>.<worker-id>.
	Key string
	// Revision is the entry's revision in the registry bucket: a new one
	// is looked at again.
	Revision uint64
	// Reason says why the entry is not offered.
	Reason string
}

// String names the entry and why it is skipped: "KEY (REASON)".
func (s SkippedEntry) String() string { return s.Key + " (" + s.Reason + ")" }

// Skipped returns the registry entries the toolset does not offer now,
// and why, sorted by key (those of tools outside its filter are left out:
// they are not wanted, not skipped).
func (r *Toolset) Skipped() []SkippedEntry {
	now := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	r.expireLocked(now)
	var out []SkippedEntry
	for _, key := range slices.Sorted(maps.Keys(r.skipped)) {
		if r.wantedLocked(key) {
			out = append(out, r.skipped[key])
		}
	}
	return out
}

// wantedLocked reports whether the tool of a registry key passes the
// filter.
func (r *Toolset) wantedLocked(key string) bool {
	name, _, _ := strings.Cut(key, ".")
	return r.filter == nil || r.filter[name]
}

// skipLocked records that the entry under key, at revision rev, is not
// offered, and logs it as a warning (a worker advertises something the
// agent cannot use): once per revision, since an update replaces the
// record.
func (r *Toolset) skipLocked(key string, rev uint64, reason string) {
	r.skipLockedAt(slog.LevelWarn, key, rev, reason)
}

// skipLockedAt is skipLocked logging at level, one level lower (warning
// to info, info to debug) for a tool outside the filter: not offered
// anyway, it matters less.
func (r *Toolset) skipLockedAt(level slog.Level, key string, rev uint64, reason string) {
	r.skipped[key] = SkippedEntry{Key: key, Revision: rev, Reason: reason}
	if !r.wantedLocked(key) {
		level -= slog.LevelWarn - slog.LevelInfo
	}
	r.log.Log(context.Background(), level, "registry entry skipped", slog.String("key", key), slog.Uint64("revision", rev), slog.String("reason", reason))
}

// expireLocked skips the entries whose expires_at has passed by now (their
// worker stopped refreshing them, as a stopped or lost worker does): an
// ordinary event, logged at info level.
func (r *Toolset) expireLocked(now time.Time) {
	for key, e := range r.entries {
		if e.ExpiresAt.After(now) {
			continue
		}
		worker := e.Worker
		if worker == "" {
			worker = "(unnamed)"
		}
		reason := "expired at " + e.ExpiresAt.UTC().Format(time.RFC3339) + ": its worker " + worker + " stopped refreshing it"
		r.skipLockedAt(slog.LevelInfo, key, r.revs[key], reason)
		delete(r.entries, key)
		delete(r.revs, key)
	}
}
