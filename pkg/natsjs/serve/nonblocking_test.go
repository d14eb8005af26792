package serve_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/offload-dev/offload/internal/offloadtest"
)

// An agent whose approvals are non-blocking (spec approve: background):
// the model gets the acknowledgement and ends its turn, so the run pauses
// with only the non-blocking call pending (marked so); the decision wakes
// the conversation, which is continued once: the tool runs once and its
// result reaches the model as a follow-up.
func TestWakeNonBlocking(t *testing.T) {
	b := setup(t)
	b.nonBlocking = true
	r1, r2 := b.replica(t, "r1"), b.replica(t, "r2")
	f := r1.start(t, "deploy prod")
	task := paused(t, f)
	if p := f.Pending[0]; !p.NonBlocking || p.Kind != "approval" {
		t.Fatalf("pending %+v, want a non-blocking approval", p)
	}
	if got := offloadtest.WaitOrTimeout(t, b.finished, "the acknowledgement's model request"); !strings.HasSuffix(got, "meanwhile.") {
		t.Fatalf("first request answered %q, want the acknowledgement", got)
	}
	if _, d := b.counts("prod"); d != 0 {
		t.Fatalf("deploy ran %d times before its decision", d)
	}
	b.decide(t, r2.js, f.ConversationID, task)
	if got := offloadtest.WaitOrTimeout(t, b.finished, "the continuation's model request"); got != "prod" {
		t.Fatalf("continued %s", got)
	}
	finished(t, r1, f.ConversationID, "done Background tool 'deploy' (task "+task+") completed.\nResult: deployed prod")
	if c, d := b.counts("prod"); c != 1 || d != 1 {
		t.Fatalf("%d continuation requests, %d deploys; want 1 and 1", c, d)
	}
	if n := r1.wakes(t) + r2.wakes(t); n != 1 {
		t.Errorf("offload_wake_seconds observed %d wakes, want 1", n)
	}
	c, err := r1.svc.Get(context.Background(), f.ConversationID)
	if err != nil || len(c.Pending) != 0 {
		t.Errorf("after the continuation: %+v, %v", c, err)
	}
}

// Two non-blocking calls pending: the decision of one is enough to wake
// the conversation (what it waits for is complete once one outcome
// arrived); the continuation runs that call, and pauses again with the
// other pending, whose decision then finishes the conversation. Each tool
// runs once.
func TestWakeNonBlockingOneOfTwo(t *testing.T) {
	b := setup(t)
	b.nonBlocking = true
	r1, r2 := b.replica(t, "r1"), b.replica(t, "r2")
	f := r1.start(t, "deploys prod staging")
	if f.Status != "paused" || len(f.Pending) != 2 {
		t.Fatalf("first run: %+v, want paused on two calls", f)
	}
	tasks := map[string]string{}
	for _, p := range f.Pending {
		var a targetArgs
		if err := json.Unmarshal(p.Args, &a); err != nil {
			t.Fatal(err)
		}
		tasks[a.Target] = p.TaskID
	}
	offloadtest.WaitOrTimeout(t, b.finished, "the acknowledgements' model request")
	b.decide(t, r2.js, f.ConversationID, tasks["prod"])
	if got := offloadtest.WaitOrTimeout(t, b.finished, "the continuation's model request"); got != "prod" {
		t.Fatalf("continued %s", got)
	}
	offloadtest.Eventually(t, "the conversation paused again on staging", func() error {
		c, err := r1.svc.Get(context.Background(), f.ConversationID)
		if err != nil {
			return err
		}
		if c.Status != "paused" || len(c.Pending) != 1 || c.Pending[0].TaskID != tasks["staging"] {
			return fmt.Errorf("%+v", c)
		}
		return nil
	})
	if _, d := b.counts("staging"); d != 0 {
		t.Fatalf("staging deployed %d times before its decision", d)
	}
	b.decide(t, r1.js, f.ConversationID, tasks["staging"])
	if got := offloadtest.WaitOrTimeout(t, b.finished, "the second continuation's model request"); got != "staging" {
		t.Fatalf("continued %s", got)
	}
	finished(t, r1, f.ConversationID, "done Background tool 'deploy' (task "+tasks["staging"]+") completed.\nResult: deployed staging")
	for _, target := range []string{"prod", "staging"} {
		if c, d := b.counts(target); c != 1 || d != 1 {
			t.Errorf("%s: %d continuation requests, %d deploys; want 1 and 1", target, c, d)
		}
	}
}
