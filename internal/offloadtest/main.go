package offloadtest

import (
	"testing"

	"go.uber.org/goleak"
)

// WrapTestMain runs the tests of m and exits, failing when goroutines
// are left running after them (goleak). Every test package calls it from
// its main_test.go:
//
//	func TestMain(m *testing.M) { offloadtest.WrapTestMain(m) }
//
// It ignores only what the packages cannot stop themselves (ignores);
// opts adds ignores of a package's own, each with its reason beside it.
func WrapTestMain(m *testing.M, opts ...goleak.Option) {
	goleak.VerifyTestMain(m, append(ignores(), opts...)...)
}

// ignores are the goroutines [WrapTestMain] does not count as leaks.
func ignores() []goleak.Option {
	return []goleak.Option{
		// nats.go v1.55.0 races in ObjectStore.Put: the Put's own JetStream
		// context starts resetPendingAcksOnReconnect, then its deferred
		// cleanupReplySub sets the status channel to nil; when the
		// goroutine reads the channel after that, it blocks on a nil
		// channel for good. One small goroutine per unlucky Put of an
		// object larger than the max payload (a long history); nothing of
		// ours to stop. Seen in convstore's and cmd/agent's tests.
		goleak.IgnoreTopFunction("github.com/nats-io/nats.go/jetstream.(*jetStream).resetPendingAcksOnReconnect"),
		// nats-server v2.15.2 sets a stream's source up on a goroutine that
		// waits for the source consumer's creation or 30 s
		// (srcConsumerWaitTime), and a server shut down meanwhile does not
		// end it: the decisions stream sources the approval timeouts
		// (SPEC §12), so every embedded server that provisions and stops
		// within 30 s may leave one. Nothing of ours to stop.
		goleak.IgnoreTopFunction("github.com/nats-io/nats-server/v2/server.(*stream).trySetupSourceConsumer.func3"),
	}
}
