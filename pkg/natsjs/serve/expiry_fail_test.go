package serve_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/offload-dev/offload/internal/offloadtest"
	"github.com/offload-dev/offload/pkg/metrics"
	"github.com/offload-dev/offload/pkg/natsjs"
	"github.com/offload-dev/offload/pkg/natsjs/serve"
	"github.com/offload-dev/offload/pkg/natsjs/serve/servetest"
	"github.com/offload-dev/offload/pkg/session"
)

// An approval whose timeout says fail (SPEC §12): no one decides, the
// server stores the timeout's decision, and the replica's continuation
// ends at once with an error naming the call: its final event's error,
// the conversation failed with that error (GET /v1/conversations/{id}),
// the model not called with the expiry, the
// wake message acked (not delivered again) and the conversation not
// continued again. The same for a non-blocking approval, whose expiry
// would otherwise be a follow-up.
func TestExpiryFailEndsTheRun(t *testing.T) {
	t.Run("blocking", func(t *testing.T) { expiryFailEndsTheRun(t, false) })
	t.Run("non-blocking", func(t *testing.T) { expiryFailEndsTheRun(t, true) })
}

func expiryFailEndsTheRun(t *testing.T, nonBlocking bool) {
	b := servetest.Setup(t)
	b.NonBlocking = nonBlocking
	b.Approval = &session.ApprovalPolicy{Timeout: time.Second, OnTimeout: session.OnTimeoutFail}
	continued := make(chan string, 4)
	approvals := metrics.NewApprovals(nil)
	r := b.ReplicaWith(t, "r1", servetest.ReplicaOpts{Config: func(c *serve.Config) {
		c.OnContinue = func(conv string) { continued <- conv }
		c.Session.Approvals = approvals
	}})
	f := r.Start(t, "deploy prod")
	task := servetest.Paused(t, f)
	if nonBlocking {
		offloadtest.WaitOrTimeout(t, b.Finished, "the acknowledgement's model request")
	}
	b.Mu.Lock()
	requests := b.Requests
	b.Mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), servetest.Wait)
	defer cancel()
	ready, final := make(chan struct{}), make(chan string, 1)
	go func() {
		_ = r.Svc.Watch(ctx, f.ConversationID, 0, func() { close(ready) }, func(_ uint64, ev json.RawMessage) bool {
			var e struct {
				Type  string `json:"type"`
				Error string `json:"error"`
			}
			if json.Unmarshal(ev, &e) == nil && e.Type == "final" {
				final <- e.Error
				return false
			}
			return true
		})
	}()
	offloadtest.WaitOrTimeout(t, ready, "the event watch")
	offloadtest.WaitOrTimeout(t, continued, "the wake on the timeout's decision")
	want := "approval of tool 'deploy' (task " + task + ") timed out (on_timeout: fail)"
	if e := offloadtest.WaitOrTimeout(t, final, "the continuation's final event"); !strings.Contains(e, want) {
		t.Fatalf("final event's error %q, want it to contain %q", e, want)
	}
	offloadtest.Eventually(t, "conversation failed", func() error {
		c, err := r.Svc.Get(context.Background(), f.ConversationID)
		if err != nil {
			return err
		}
		if c.Status != "failed" || c.Error != want || len(c.Pending) != 0 {
			return errors.New("status " + c.Status + ", error " + c.Error + ", pending " + string(must(json.Marshal(c.Pending))))
		}
		return nil
	})
	// Counted as expired, never as a person's denial.
	if n := testutil.ToFloat64(approvals.ApprovalsTotal.WithLabelValues("deploy", "expired")); n != 1 {
		t.Errorf("offload_approvals_total{tool=deploy,outcome=expired} = %v, want 1", n)
	}
	if n := testutil.ToFloat64(approvals.ApprovalsTotal.WithLabelValues("deploy", "denied")); n != 0 {
		t.Errorf("offload_approvals_total{tool=deploy,outcome=denied} = %v, want 0", n)
	}
	b.Mu.Lock()
	calls := b.Requests - requests
	b.Mu.Unlock()
	if _, deploys := b.Counts("prod"); calls != 0 || deploys != 0 {
		t.Errorf("after the expiry: %d model requests, %d deploys; want none", calls, deploys)
	}
	// The wake message was acked: nothing pending, nothing delivered again.
	c, err := r.JS.Consumer(ctx, natsjs.NamesFor("").Decisions, natsjs.WakeConsumerName)
	if err != nil {
		t.Fatal(err)
	}
	offloadtest.Eventually(t, "the wake message acked", func() error {
		ci, err := c.Info(ctx)
		if err != nil {
			return err
		}
		if ci.NumAckPending != 0 || ci.NumPending != 0 || ci.NumRedelivered != 0 || ci.Delivered.Consumer != 1 {
			return errors.New("not acked once: " + string(must(json.Marshal(ci))))
		}
		return nil
	})
	// Once the replica has stopped (its run's end and re-check done),
	// nothing continued the conversation again nor asked for it.
	r.Close(t)
	select {
	case conv := <-continued:
		t.Errorf("conversation %s continued again", conv)
	default:
	}
	ws, err := r.JS.Stream(ctx, natsjs.NamesFor("").Wake)
	if err != nil {
		t.Fatal(err)
	}
	if info, err := ws.Info(ctx); err != nil || info.State.Msgs != 0 {
		t.Errorf("wake markers after the failure: %+v, %v; want none", info.State, err)
	}
}

func must[T any](v T, _ error) T { return v }
