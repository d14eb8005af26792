package serve_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"

	"github.com/offload-dev/offload/internal/offloadtest"
	"github.com/offload-dev/offload/pkg/conversation"
	"github.com/offload-dev/offload/pkg/natsjs/internal/jstest"
	"github.com/offload-dev/offload/pkg/natsjs/serve"
	"github.com/offload-dev/offload/pkg/protocol"
)

// reasonSignal is a slog.Handler that sends the reason of every refusal
// ("message refused") on Ch.
type reasonSignal struct {
	slog.Handler
	Ch chan string
}

func (h reasonSignal) Handle(ctx context.Context, r slog.Record) error {
	if r.Message == "message refused" {
		r.Attrs(func(a slog.Attr) bool {
			if a.Key == "reason" {
				select {
				case h.Ch <- a.Value.String():
				default:
				}
				return false
			}
			return true
		})
	}
	return h.Handler.Handle(ctx, r)
}

func (h reasonSignal) Enabled(context.Context, slog.Level) bool { return true }

func (h reasonSignal) WithAttrs(as []slog.Attr) slog.Handler {
	return reasonSignal{h.Handler.WithAttrs(as), h.Ch}
}

func (h reasonSignal) WithGroup(g string) slog.Handler {
	return reasonSignal{h.Handler.WithGroup(g), h.Ch}
}

// refusedFor waits for a refusal of reason on refused, skipping others.
func refusedFor(t *testing.T, refused <-chan string, reason, what string) {
	t.Helper()
	for {
		if got := offloadtest.WaitOrTimeout(t, refused, what); got == reason {
			return
		}
	}
}

// Quorum 2 (SPEC §12) of a non-blocking call while its run is live (the
// agent's approvals non-blocking, the slow tool of the same response
// gated): the live wait counts the approvals as a continuation does. One
// approval does not run the call: the same identity's second is refused
// duplicate_identity (the signal that the live read counted the first);
// a second identity's runs it, once, in the same run, which finishes
// (not paused: the live read took the quorum).
func TestQuorumLiveNonBlocking(t *testing.T) {
	b := setup(t)
	b.trust = true
	b.nonBlocking = true
	b.approval = &serve.ApprovalPolicy{Required: 2}
	refused := make(chan string, 64)
	r := b.replicaWith(t, "r1", replicaOpts{inboxLog: slog.New(reasonSignal{jstest.Logger().Handler(), refused})})
	sub, err := r.js.Conn().SubscribeSync("tools.approval.>")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	run, err := r.svc.Start(ctx, "ops", "both prod", "")
	if err != nil {
		t.Fatal(err)
	}
	offloadtest.WaitOrTimeout(t, b.slowStarted, "the slow tool")
	m, err := sub.NextMsg(wait)
	if err != nil {
		t.Fatalf("the deploy's announcement: %v", err)
	}
	ap, err := protocol.DecodeApproval(m.Data, nil)
	if err != nil || ap.Tool != "deploy" {
		t.Fatalf("announcement %s: %+v, %v", m.Data, ap, err)
	}
	conv, task := run.ConversationID, ap.TaskID
	publishDecision(t, r.js, conv, task, `{"approved":true,"by":"ann"}`)
	publishDecision(t, r.js, conv, task, `{"approved":true,"by":"ann"}`)
	refusedFor(t, refused, conversation.ReasonDuplicateIdentity, "ann's second approval refused duplicate_identity by the live read")
	if _, d := b.counts("prod"); d != 0 {
		t.Fatalf("deploy ran %d times with one approver of two", d)
	}
	// bob's approval completes the quorum: bob's second is then refused
	// as a duplicate (the signal that the live read took the first).
	publishDecision(t, r.js, conv, task, `{"approved":true,"by":"bob"}`)
	publishDecision(t, r.js, conv, task, `{"approved":true,"by":"bob"}`)
	refusedFor(t, refused, conversation.ReasonDuplicate, "bob's second approval refused duplicate by the live read")
	// The approved call runs once the slow tool returned (the run
	// delivers outcomes between steps).
	close(b.slowGate)
	offloadtest.WaitOrTimeout(t, b.deployed, "the deploy, once bob approved too")
	select {
	case <-run.Done():
	case <-ctx.Done():
		t.Fatal("the run did not end")
	}
	if f := run.Final(); f.Status != "finished" || !strings.Contains(f.Output, "deployed prod") {
		t.Fatalf("run: %+v, want finished with the deploy's result", f)
	}
	if _, d := b.counts("prod"); d != 1 {
		t.Fatalf("deploy ran %d times, want 1", d)
	}
}
