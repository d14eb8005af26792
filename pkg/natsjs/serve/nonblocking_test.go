package serve_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/offload-dev/offload/internal/offloadtest"
	"github.com/offload-dev/offload/pkg/natsjs/serve/servetest"
)

// An agent whose approvals are non-blocking (spec approve: background):
// the model gets the acknowledgement and ends its turn, so the run pauses
// with only the non-blocking call pending (marked so); the decision wakes
// the conversation, which is continued once: the tool runs once and its
// result reaches the model as a follow-up.
func TestWakeNonBlocking(t *testing.T) {
	b := servetest.Setup(t)
	b.NonBlocking = true
	r1, r2 := b.Replica(t, "r1"), b.Replica(t, "r2")
	f := r1.Start(t, "deploy prod")
	task := servetest.Paused(t, f)
	if p := f.Pending[0]; !p.NonBlocking || p.Kind != "approval" {
		t.Fatalf("pending %+v, want a non-blocking approval", p)
	}
	if got := offloadtest.WaitOrTimeout(t, b.Finished, "the acknowledgement's model request"); !strings.HasSuffix(got, "meanwhile.") {
		t.Fatalf("first request answered %q, want the acknowledgement", got)
	}
	if _, d := b.Counts("prod"); d != 0 {
		t.Fatalf("deploy ran %d times before its decision", d)
	}
	b.Decide(t, r2.JS, f.ConversationID, task)
	if got := offloadtest.WaitOrTimeout(t, b.Finished, "the continuation's model request"); got != "prod" {
		t.Fatalf("continued %s", got)
	}
	servetest.Finished(t, r1, f.ConversationID, "done Background tool 'deploy' (task "+task+") completed.\nResult: deployed prod")
	if c, d := b.Counts("prod"); c != 1 || d != 1 {
		t.Fatalf("%d continuation requests, %d deploys; want 1 and 1", c, d)
	}
	if n := r1.Wakes(t) + r2.Wakes(t); n != 1 {
		t.Errorf("offload_wake_seconds observed %d wakes, want 1", n)
	}
	c, err := r1.Svc.Get(context.Background(), f.ConversationID)
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
	b := servetest.Setup(t)
	b.NonBlocking = true
	r1, r2 := b.Replica(t, "r1"), b.Replica(t, "r2")
	f := r1.Start(t, "deploys prod staging")
	if f.Status != "paused" || len(f.Pending) != 2 {
		t.Fatalf("first run: %+v, want paused on two calls", f)
	}
	tasks := map[string]string{}
	for _, p := range f.Pending {
		var a servetest.TargetArgs
		if err := json.Unmarshal(p.Args, &a); err != nil {
			t.Fatal(err)
		}
		tasks[a.Target] = p.TaskID
	}
	offloadtest.WaitOrTimeout(t, b.Finished, "the acknowledgements' model request")
	b.Decide(t, r2.JS, f.ConversationID, tasks["prod"])
	if got := offloadtest.WaitOrTimeout(t, b.Finished, "the continuation's model request"); got != "prod" {
		t.Fatalf("continued %s", got)
	}
	offloadtest.Eventually(t, "the conversation paused again on staging", func() error {
		c, err := r1.Svc.Get(context.Background(), f.ConversationID)
		if err != nil {
			return err
		}
		if c.Status != "paused" || len(c.Pending) != 1 || c.Pending[0].TaskID != tasks["staging"] {
			return fmt.Errorf("%+v", c)
		}
		return nil
	})
	if _, d := b.Counts("staging"); d != 0 {
		t.Fatalf("staging deployed %d times before its decision", d)
	}
	b.Decide(t, r1.JS, f.ConversationID, tasks["staging"])
	if got := offloadtest.WaitOrTimeout(t, b.Finished, "the second continuation's model request"); got != "staging" {
		t.Fatalf("continued %s", got)
	}
	servetest.Finished(t, r1, f.ConversationID, "done Background tool 'deploy' (task "+tasks["staging"]+") completed.\nResult: deployed staging")
	for _, target := range []string{"prod", "staging"} {
		if c, d := b.Counts(target); c != 1 || d != 1 {
			t.Errorf("%s: %d continuation requests, %d deploys; want 1 and 1", target, c, d)
		}
	}
}
