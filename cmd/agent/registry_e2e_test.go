package main

import (
	"strings"
	"testing"

	"github.com/offload-dev/offload/pkg/natsjs"
	"github.com/offload-dev/offload/pkg/natsjs/natstest"
)

// Registry entries the agent cannot offer are named with their reason: in
// the --tools error (not just "available: none"), in the note that no
// tool is offered, and in the log (-v or not).
func TestBinaryNamesSkippedRegistryEntries(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	js := srv.JetStream(t)
	kv, err := natsjs.EnsureRegistry(t.Context(), js, natsjs.ProvisionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(t.Context(), "sleep.w1", []byte(`{"name":"sleep","parameters":{"type":"object"},"worker":"w1"}`)); err != nil {
		t.Fatal(err)
	}
	const why = "sleep.w1 (no expires_at: an entry must say until when it is valid)"

	out := runBinary(t, nil, "run", "--nats", srv.URL(), "--model", "test", "--tools", "sleep", "x")
	if out.code != 2 || !strings.Contains(out.stderr, "(available: none); registry entries skipped: "+why) {
		t.Fatalf("--tools sleep: exit %d stderr %q", out.code, out.stderr)
	}
	if !strings.Contains(out.stderr, `msg="registry entry skipped" key=sleep.w1`) {
		t.Errorf("the skip is not logged: %q", out.stderr)
	}

	out = runBinary(t, nil, "run", "--nats", srv.URL(), "--model", "test", "x")
	if out.code != 0 || !strings.Contains(out.stderr, "(the model is offered no tools); registry entries skipped: "+why) {
		t.Fatalf("no --tools: exit %d stderr %q", out.code, out.stderr)
	}
	if n := strings.Count(out.stderr, `msg="registry entry skipped"`); n != 1 {
		t.Errorf("the skip is logged %d times, want once:\n%s", n, out.stderr)
	}
}
