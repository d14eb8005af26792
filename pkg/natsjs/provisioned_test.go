package natsjs_test

import (
	"context"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/offload-dev/offload/pkg/natsjs"
)

// mustProvision creates the default streams, buckets and consumers on js,
// failing the test if it cannot.
func mustProvision(t *testing.T, js jetstream.JetStream) {
	t.Helper()
	if err := natsjs.Provision(context.Background(), js, natsjs.ProvisionOptions{}); err != nil {
		t.Fatal(err)
	}
}
