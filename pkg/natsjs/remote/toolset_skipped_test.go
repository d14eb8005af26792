package remote_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/offload-dev/offload/internal/offloadtest"
	"github.com/offload-dev/offload/pkg/natsjs/remote"
)

// skipLogs returns, by registry key, the reasons logged for skipped
// entries in the JSON lines of logs.
func skipLogs(t *testing.T, logs string) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	for key, recs := range skipRecords(t, logs) {
		for _, r := range recs {
			out[key] = append(out[key], r.Reason)
		}
	}
	return out
}

// skipRecord is the log record of a skipped entry.
type skipRecord struct{ Level, Msg, Key, Reason string }

// skipRecords returns the records of skipped entries in the JSON lines of
// logs, by registry key.
func skipRecords(t *testing.T, logs string) map[string][]skipRecord {
	t.Helper()
	out := map[string][]skipRecord{}
	for _, line := range strings.Split(strings.TrimSpace(logs), "\n") {
		var rec skipRecord
		if line == "" {
			continue
		}
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		if rec.Msg == "registry entry skipped" {
			out[rec.Key] = append(out[rec.Key], rec)
		}
	}
	return out
}

// Every registry entry the toolset cannot offer is skipped with its key and
// reason: logged once per revision (not at every Tools call), and listed
// by Skipped. An unusable entry does not hide another worker's usable one
// of the same tool.
func TestRegistrySkippedEntriesAreLogged(t *testing.T) {
	t.Parallel()
	b := setup(t)
	d, _ := b.dispatcher(t, remote.DispatcherConfig{})
	var logs offloadtest.Output
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	r, err := remote.NewToolset(remote.ToolsetConfig{Conn: b.srv.Conn(t), Dispatcher: d,
		Logger: slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Stop(context.Background()) })
	kv := b.registry(t)
	put := func(key, value string) {
		t.Helper()
		changed := r.Changed()
		if _, err := kv.Put(context.Background(), key, []byte(value)); err != nil {
			t.Fatal(err)
		}
		offloadtest.WaitOrTimeout(t, changed, "the entry "+key+" to be seen")
	}
	hour := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
	past := time.Now().Add(-time.Hour).UTC().Format(time.RFC3339)
	put("noexpiry.w", `{"name":"noexpiry","parameters":{"type":"object"},"worker":"w"}`)
	put("stale.w", `{"name":"stale","parameters":{"type":"object"},"worker":"w","expires_at":"`+past+`"}`)
	put("broken.w", `{"name":`)
	put("named.w", `{"name":"other","worker":"w","expires_at":"`+hour+`"}`)
	put("dup.a", `{"name":"dup","parameters":{"type":"string"},"worker":"a","expires_at":"`+hour+`"}`)
	put("dup.b", `{"name":"dup","parameters":{"type":"object"},"worker":"b","expires_at":"`+hour+`"}`)
	put("ok.w", `{"name":"ok","parameters":{"type":"object"},"worker":"w","expires_at":"`+hour+`"}`)
	for range 3 { // steps of a run: nothing is logged again
		if got := toolNames(t, r); !slices.Equal(got, []string{"dup", "ok"}) {
			t.Fatalf("tools %v, want [dup ok]", got)
		}
	}
	want := map[string]string{
		"noexpiry.w": "no expires_at",
		"stale.w":    "was already past when read",
		"broken.w":   "registry entry broken.w",
		"named.w":    `names tool "other"`,
		"dup.a":      "unusable definition",
	}
	logged := skipLogs(t, logs.String())
	for key, reason := range want {
		if got := logged[key]; len(got) != 1 || !strings.Contains(got[0], reason) {
			t.Errorf("%s: logged %q, want once with %q", key, got, reason)
		}
	}
	if len(logged) != len(want) {
		t.Errorf("logged skips %v, want those of %v", logged, want)
	}
	for key, recs := range skipRecords(t, logs.String()) {
		if recs[0].Level != "WARN" {
			t.Errorf("%s logged at level %s, want WARN", key, recs[0].Level)
		}
	}
	skipped := r.Skipped()
	var keys []string
	for _, s := range skipped {
		keys = append(keys, s.Key)
		if !strings.Contains(s.Reason, want[s.Key]) || s.Revision == 0 {
			t.Errorf("skipped %+v, want reason %q", s, want[s.Key])
		}
	}
	if !slices.Equal(keys, []string{"broken.w", "dup.a", "named.w", "noexpiry.w", "stale.w"}) {
		t.Errorf("skipped keys %v", keys)
	}

	// A new revision is looked at (and logged) again; a fixed one is
	// offered and no longer skipped.
	put("noexpiry.w", `{"name":"noexpiry","parameters":{"type":"object"},"worker":"w"}`)
	put("stale.w", `{"name":"stale","parameters":{"type":"object"},"worker":"w","expires_at":"`+hour+`"}`)
	if got := toolNames(t, r); !slices.Equal(got, []string{"dup", "ok", "stale"}) {
		t.Fatalf("tools %v", got)
	}
	logged = skipLogs(t, logs.String())
	if len(logged["noexpiry.w"]) != 2 || len(logged["stale.w"]) != 1 {
		t.Errorf("logged %v: want noexpiry.w twice (two revisions), stale.w once", logged)
	}
	if slices.ContainsFunc(r.Skipped(), func(s remote.SkippedEntry) bool { return s.Key == "stale.w" }) {
		t.Errorf("the refreshed entry is still skipped: %+v", r.Skipped())
	}

	// An entry that expires (its worker stopped refreshing it) is skipped
	// once, as the clock passes its expires_at, with no update in between.
	expires := time.Now().Add(300 * time.Millisecond)
	put("brief.w", `{"name":"brief","parameters":{"type":"object"},"worker":"w","expires_at":"`+expires.UTC().Format(time.RFC3339Nano)+`"}`)
	time.Sleep(time.Until(expires) + time.Millisecond) // only the clock says it expired
	for range 3 {
		if got := toolNames(t, r); slices.Contains(got, "brief") {
			t.Fatalf("tools %v after brief expired", got)
		}
	}
	if got := skipRecords(t, logs.String())["brief.w"]; len(got) != 1 || got[0].Level != "INFO" || !strings.Contains(got[0].Reason, "expired at") || !strings.Contains(got[0].Reason, "worker w stopped refreshing it") {
		t.Errorf("brief.w: logged %+v, want once at info level, expired", got)
	}
}

// A filtered toolset logs a level lower (info, seen with -v) the skipped
// entries of tools it does not offer anyway, and does not list them.
func TestRegistrySkippedOutsideTheFilter(t *testing.T) {
	t.Parallel()
	b := setup(t)
	d, _ := b.dispatcher(t, remote.DispatcherConfig{})
	var logs offloadtest.Output
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	r, err := remote.NewToolset(remote.ToolsetConfig{Conn: b.srv.Conn(t), Dispatcher: d, Filter: []string{"wanted"},
		Logger: slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Stop(context.Background()) })
	kv := b.registry(t)
	for _, key := range []string{"other.w", "wanted.w"} {
		changed := r.Changed()
		name, _, _ := strings.Cut(key, ".")
		if _, err := kv.Put(context.Background(), key, []byte(`{"name":"`+name+`","worker":"w"}`)); err != nil {
			t.Fatal(err)
		}
		offloadtest.WaitOrTimeout(t, changed, "the entry "+key+" to be seen")
	}
	if s := r.Skipped(); len(s) != 1 || s[0].Key != "wanted.w" {
		t.Errorf("skipped %+v, want wanted.w only", s)
	}
	recs := skipRecords(t, logs.String())
	if len(recs) != 2 || len(recs["wanted.w"]) != 1 || recs["wanted.w"][0].Level != "WARN" || len(recs["other.w"]) != 1 || recs["other.w"][0].Level != "INFO" {
		t.Errorf("logged %v, want wanted.w as a warning, other.w at info level", recs)
	}
}
