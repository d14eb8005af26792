package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/offload-dev/offload/pkg/natsjs"
	"github.com/offload-dev/offload/pkg/natsjs/conformance"
	"github.com/offload-dev/offload/pkg/natsjs/natstest"
)

// nodeExample is the worker in JavaScript under examples/.
var nodeExample = filepath.Join("..", "..", "examples", "node-worker")

// TestCheckAgainstNodeExample: the example worker in JavaScript (Node 20,
// the official NATS client, written from docs/PROTOCOL.md) passes every
// rule of toolworker check, which starts it (--exec), stops it (SIGTERM)
// and kills it (SIGKILL) too. It needs node and the
// example's dependencies (npm ci, which .ci/run runs); without them it is
// skipped, except in CI, where it fails.
func TestCheckAgainstNodeExample(t *testing.T) {
	t.Parallel()
	node, err := exec.LookPath("node")
	if _, serr := os.Stat(filepath.Join(nodeExample, "node_modules", "nats")); err != nil || serr != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("node and the example's dependencies are needed (.ci/run runs npm ci in %s): %v, %v", nodeExample, err, serr)
		}
		t.Skipf("node or %s/node_modules missing (npm ci there): %v, %v", nodeExample, err, serr)
	}
	bin, _ := binaries(t)
	srv := natstest.Start(t)
	// What an admin provisions: the streams, and the tool's consumer with a
	// short ack wait, so that the slow call outlives it.
	ctx := context.Background()
	js := srv.JetStream(t)
	if err := natsjs.Provision(ctx, js, natsjs.ProvisionOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := natsjs.EnsureTaskConsumer(ctx, js, "nap", natsjs.ProvisionOptions{AckWait: time.Second}); err != nil {
		t.Fatal(err)
	}
	worker := fmt.Sprintf("%s %s --nats %s --id node-1", node, filepath.Join(nodeExample, "worker.mjs"), srv.URL())
	code, out, stderr := runBinCheck(t, bin, "--nats", srv.URL(), "--tool", "nap", "--args", `{"seconds":0}`, "--slow-args", `{"seconds":1.6}`, "--timeout", "20s", "--exec", worker)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if code != 0 || len(lines) != len(conformance.Rules()) {
		t.Fatalf("check: exit %d, %d lines:\n%s\nstderr (the worker's logs): %s", code, len(lines), out, stderr)
	}
	for i, r := range conformance.Rules() {
		if lines[i] != r+": ok" {
			t.Errorf("line %d %q, want %q", i, lines[i], r+": ok")
		}
	}
	if !strings.Contains(stderr, `"msg":"worker stopped"`) {
		t.Errorf("the worker did not log its graceful stop: %s", stderr)
	}
}
