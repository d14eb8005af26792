// Package storetest is a conformance suite for [conversation.Store],
// written once and run against every store, as River's riverdrivertest is
// for its drivers and pkg/agent/bgtest is for offload's executors:
// pkg/conversation runs it against [conversation.Memory], natsjs/convstore
// against the JetStream store.
//
// A [Harness] makes a fresh, empty backend per case and opens stores over
// it, each open standing for another process; cases never share a
// backend, so they run in parallel. What only one store can do (a history
// beyond the server's max payload, a lease that lapses when its holder
// dies, retries while no stream answers) stays in that store's own tests.
// Every wait of the suite is bounded.
package storetest

import (
	"testing"
	"time"

	"github.com/offload-dev/offload/pkg/conversation"
)

// Harness makes the backends of a store under test.
type Harness struct {
	// Name names the store in failure messages.
	Name string
	// New returns a fresh, empty backend and registers its own cleanup
	// with t. open returns a store over the backend: each call stands for
	// another process (an in-memory store may return itself). A Claim of
	// a conversation another holder keeps waits claimWait for it to be
	// released before it fails; claimWait also bounds how long a lease
	// outlives its holder's last renewal where leases lapse.
	New func(t *testing.T, claimWait time.Duration) (open func(t *testing.T) conversation.Store)
}

// Run runs every case against h, each as a parallel subtest.
func Run(t *testing.T, h Harness) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			c.fn(t, h)
		})
	}
}

// Cases returns the names of the cases, in order.
func Cases() []string {
	out := make([]string, len(cases))
	for i, c := range cases {
		out[i] = c.name
	}
	return out
}

type testCase struct {
	name string
	fn   func(t *testing.T, h Harness)
}

var cases = []testCase{
	{"LoadUnknown", loadUnknown},
	{"SaveLoad", saveLoad},
	{"CreateOnce", createOnce},
	{"LoadedStateIsACopy", loadedCopy},
	{"CompareAndSet", compareAndSet},
	{"LongHistory", longHistory},
	{"ListSorted", listSorted},
	{"ClaimHeld", claimHeld},
	{"ReleaseWakesClaim", releaseWakesClaim},
	{"ClaimAfterRelease", claimAfterRelease},
}
