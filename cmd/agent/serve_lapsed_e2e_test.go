package main

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/offload-dev/offload/internal/offloadtest"
	"github.com/offload-dev/offload/pkg/llm"
	"github.com/offload-dev/offload/pkg/llm/openaicompat/openaitest"
	"github.com/offload-dev/offload/pkg/llm/script"
	"github.com/offload-dev/offload/pkg/message"
)

// SIGKILL of the replica whose run's model request is in flight (a run
// started over the API: no wake message exists for it): the other
// replica continues the conversation once the lease lapsed (15 s) and
// its sweep of the running conversations came (every 5 s, jittered), with
// no message published, and it finishes; the model is asked again once.
func TestServeE2ESweepsKilledRun(t *testing.T) {
	w := newServeWorld(t)
	var (
		mu       sync.Mutex
		requests int
	)
	inflight, release := make(chan struct{}, 1), make(chan struct{})
	model := script.New("fake-model", func(ctx context.Context, _ *llm.Request) (*llm.Response, error) {
		mu.Lock()
		requests++
		first := requests == 1
		mu.Unlock()
		if first {
			// The killed replica's request: never answered.
			inflight <- struct{}{}
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-release:
				return nil, context.Canceled
			}
		}
		return &llm.Response{Parts: []message.Part{message.Text{Content: "finished after the kill"}}}, nil
	})
	srv := openaitest.NewServer(model, openaitest.WithAPIKey("sk-test"))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(release) }) // before srv.Close: a hung request ends
	t.Setenv("OPENAI_BASE_URL", srv.URL())

	r1, url1 := w.replica(t)
	_, url2 := w.replica(t)
	code, started := api(t, "POST", url1+"/v1/conversations", serveOperator, `{"agent":"ops","prompt":"hello"}`)
	if code != 202 {
		t.Fatalf("start: %d %v", code, started)
	}
	conv := started["conversation_id"].(string)
	offloadtest.WaitOrTimeout(t, inflight, "r1's model request")
	r1.Kill()
	offloadtest.WaitOrTimeout(t, r1.Done(), "the replica killed")
	killed := time.Now()
	view := awaitFinishedWithin(t, 30*time.Second, url2, conv) // the 15 s lease, and slack
	// SPEC §11: continued once the lease lapses, ≤ 15 s after the kill (a
	// sweep just after the lapse), plus the continuation's own run.
	offloadtest.Bound(t, time.Since(killed), 17*time.Second, "continuing the killed replica's run")
	if out, _ := view["output"].(string); !strings.Contains(out, "finished after the kill") {
		t.Errorf("output %q", out)
	}
	mu.Lock()
	defer mu.Unlock()
	if requests != 2 {
		t.Errorf("%d model requests, want 2 (the killed one, the continuation's)", requests)
	}
}
