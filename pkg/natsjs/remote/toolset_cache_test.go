package remote_test

import (
	"context"
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/offload-dev/offload/internal/offloadtest"
	"github.com/offload-dev/offload/pkg/natsjs"
	"github.com/offload-dev/offload/pkg/natsjs/remote"
)

// TestToolsAnswerEndsAtExpiry checks that the tools RemoteToolset.Tools
// keeps between registry updates go when an entry expires, with no update
// in between, and that the answer is the caller's to change.
func TestToolsAnswerEndsAtExpiry(t *testing.T) {
	t.Parallel()
	b := setup(t)
	d, _ := b.dispatcher(t, remote.DispatcherConfig{})
	r := b.toolset(t, d, nil)
	kv := b.registry(t)
	put := func(name string, expires time.Time) {
		t.Helper()
		v, _ := json.Marshal(natsjs.RegistryEntry{Name: name, Parameters: json.RawMessage(`{"type":"object"}`), Worker: "w", ExpiresAt: expires})
		changed := r.Changed()
		if _, err := kv.Put(context.Background(), natsjs.RegistryKey(name, "w"), v); err != nil {
			t.Fatal(err)
		}
		offloadtest.WaitOrTimeout(t, changed, "the entry of "+name+" to be seen")
	}
	put("lasting", time.Now().Add(time.Hour))
	expires := time.Now().Add(300 * time.Millisecond)
	put("brief", expires)
	if got := toolNames(t, r); !slices.Equal(got, []string{"brief", "lasting"}) {
		t.Fatalf("tools %v", got)
	}
	first, err := r.Tools(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	first[0] = nil // the caller's copy
	if got := toolNames(t, r); !slices.Equal(got, []string{"brief", "lasting"}) {
		t.Fatalf("tools after the caller changed its answer: %v", got)
	}
	// No update comes: only the clock says the entry has expired, and
	// the clock is the registry's (ExpiresAt against time.Now), which a
	// fake clock cannot reach from the server's goroutines.
	time.Sleep(time.Until(expires) + time.Millisecond)
	if got := toolNames(t, r); !slices.Equal(got, []string{"lasting"}) {
		t.Fatalf("tools after brief expired: %v, want [lasting]", got)
	}
}
