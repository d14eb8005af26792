package main

import (
	"strings"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/offload-dev/offload/pkg/natsjs/natstest"
)

// agent provision creates agent serve's wake consumers (from
// jetstream/consumers/wake.json), one on each stream that wakes a
// conversation, and its notify consumer (consumers/notify.json), and says
// so.
func TestProvisionWakeConsumers(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	var stdout, stderr strings.Builder
	e := env{getenv: func(string) string { return "" }, stdin: strings.NewReader(""), stdout: &stdout, stderr: &stderr}
	if code := execute(t.Context(), []string{"provision", "--nats", srv.URL()}, e); code != exitOK {
		t.Fatalf("provision: exit %d\n%s", code, stderr.String())
	}
	js, err := jetstream.New(srv.Conn(t))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(stdout.String(), "consumer TOOLS_APPROVALS notify\n") {
		t.Errorf("provision's output does not name the notify consumer:\n%s", stdout.String())
	}
	if _, err := js.Consumer(t.Context(), "TOOLS_APPROVALS", "notify"); err != nil {
		t.Errorf("notify consumer: %v", err)
	}
	for _, stream := range []string{"TOOLS_DECISIONS", "TOOLS_ANSWERS", "TOOLS_RESULTS", "TOOLS_WAKE"} {
		if !strings.Contains(stdout.String(), "consumer "+stream+" wake\n") {
			t.Errorf("provision's output does not name the wake consumer of %s:\n%s", stream, stdout.String())
		}
		c, err := js.Consumer(t.Context(), stream, "wake")
		if err != nil {
			t.Errorf("wake consumer of %s: %v", stream, err)
			continue
		}
		if info := c.CachedInfo(); !info.Config.HeadersOnly {
			t.Errorf("wake consumer of %s is not headers only: %+v", stream, info.Config)
		}
	}
}
