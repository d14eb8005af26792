// Package deploy holds deployment files; its test checks that they stay
// valid.
package deploy

import (
	"testing"

	"github.com/nats-io/nats-server/v2/server"
)

func TestNATSConfigParses(t *testing.T) {
	t.Parallel()
	opts, err := server.ProcessConfigFile("nats/nats-server.conf")
	if err != nil {
		t.Fatal(err)
	}
	if !opts.JetStream || opts.MaxPayload != 1<<20 || opts.Port != 4222 {
		t.Fatalf("jetstream %v max_payload %d port %d", opts.JetStream, opts.MaxPayload, opts.Port)
	}
}
