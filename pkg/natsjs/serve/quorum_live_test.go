package serve_test

import (
	"context"
	"log/slog"
	"testing"

	"github.com/offload-dev/offload/internal/offloadtest"
	"github.com/offload-dev/offload/pkg/conversation"
	"github.com/offload-dev/offload/pkg/natsjs/serve/servetest"
	"github.com/offload-dev/offload/pkg/protocol"
	"github.com/offload-dev/offload/pkg/service"
	"github.com/offload-dev/offload/pkg/session"
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
// a second identity's completes the quorum and runs the call, once.
func TestQuorumLiveNonBlocking(t *testing.T) {
	b := servetest.Setup(t)
	b.Trust = true
	b.NonBlocking = true
	b.Approval = &session.ApprovalPolicy{Required: 2}
	refused := make(chan string, 64)
	r := b.ReplicaWith(t, "r1", servetest.ReplicaOpts{InboxLog: slog.New(reasonSignal{servetest.Logger().Handler(), refused})})
	run, conv, task := startBoth(t, b, r)
	publishDecision(t, r.JS, conv, task, `{"approved":true,"by":"ann"}`)
	publishDecision(t, r.JS, conv, task, `{"approved":true,"by":"ann"}`)
	refusedFor(t, refused, conversation.ReasonDuplicateIdentity, "ann's second approval refused duplicate_identity by the live read")
	if _, d := b.Counts("prod"); d != 0 {
		t.Fatalf("deploy ran %d times with one approver of two", d)
	}
	// bob's approval completes the quorum. (A second of bob's is not
	// awaited as a signal: the live read that completes the quorum ends
	// the wait, and reads it only when both were stored before it.)
	publishDecision(t, r.JS, conv, task, `{"approved":true,"by":"bob"}`)
	// The approved call runs once the slow tool returned (the run
	// delivers outcomes between steps), whether the live read took the
	// approval or the run's continuation does.
	close(b.SlowGate)
	offloadtest.WaitOrTimeout(t, b.Deployed, "the deploy, once bob approved too")
	// The run finishes with the deploy's result, or pauses when its turn
	// ended before the read handed the outcome over (the refusal that
	// signals the read is logged before): its continuation delivers it.
	if f := ended(t, run); f.Status != "finished" && f.Status != "paused" {
		t.Fatalf("run: %+v", f)
	}
	servetest.Finished(t, r, conv, "done Background tool 'deploy' (task "+task+") completed.\nResult: deployed prod")
	if _, d := b.Counts("prod"); d != 1 {
		t.Fatalf("deploy ran %d times, want 1", d)
	}
}

// startBoth starts "both prod" on r (the non-blocking deploy, then slow,
// gated, keeping the run live) and returns its run, conversation and the
// deploy's task, once its approval is announced and slow runs.
func startBoth(t *testing.T, b *servetest.World, r *servetest.Replica) (*service.Run, string, string) {
	t.Helper()
	return startPrompt(t, b, r, "both prod")
}

// startPrompt is startBoth with prompt ("both X" or "both+ask X").
func startPrompt(t *testing.T, b *servetest.World, r *servetest.Replica, prompt string) (*service.Run, string, string) {
	t.Helper()
	sub, err := r.JS.Conn().SubscribeSync("tools.approval.>")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	ctx, cancel := context.WithTimeout(context.Background(), servetest.Wait)
	defer cancel()
	run, err := r.Svc.StartConversation(ctx, "ops", prompt, "")
	if err != nil {
		t.Fatal(err)
	}
	offloadtest.WaitOrTimeout(t, b.SlowStarted, "the slow tool")
	m, err := sub.NextMsg(servetest.Wait)
	if err != nil {
		t.Fatalf("the deploy's announcement: %v", err)
	}
	ap, err := protocol.DecodeApproval(m.Data, nil)
	if err != nil || ap.Tool != "deploy" {
		t.Fatalf("announcement %s: %+v, %v", m.Data, ap, err)
	}
	return run, run.ConversationID, ap.TaskID
}

// ended waits for run to end and returns its Final.
func ended(t *testing.T, run *service.Run) service.Final {
	t.Helper()
	offloadtest.WaitOrTimeout(t, run.Done(), "the run to end")
	return run.Final()
}

// One approval of two counted while the run is live, then the run
// pauses (the model ended its turn, the call still waiting): the
// approval is not lost nor taken for the quorum by the save. The same
// identity again does not run the call; a second identity's wakes the
// conversation and runs it once.
func TestQuorumLiveThenPaused(t *testing.T) {
	b := servetest.Setup(t)
	b.Trust = true
	b.NonBlocking = true
	b.Approval = &session.ApprovalPolicy{Required: 2}
	refused := make(chan string, 64)
	r := b.ReplicaWith(t, "r1", servetest.ReplicaOpts{InboxLog: slog.New(reasonSignal{servetest.Logger().Handler(), refused})})
	run, conv, task := startBoth(t, b, r)
	publishDecision(t, r.JS, conv, task, `{"approved":true,"by":"ann"}`)
	publishDecision(t, r.JS, conv, task, `{"approved":true,"by":"ann"}`)
	refusedFor(t, refused, conversation.ReasonDuplicateIdentity, "ann's second approval refused duplicate_identity by the live read")
	close(b.SlowGate)
	if f := ended(t, run); f.Status != "paused" || len(f.Pending) != 1 || f.Pending[0].TaskID != task {
		t.Fatalf("run: %+v, want paused on the deploy", f)
	}
	if c, err := r.Svc.Get(context.Background(), conv); err != nil || len(c.Pending) != 1 || c.Pending[0].Required != 2 {
		t.Fatalf("paused conversation %+v, %v; want the deploy pending with required 2", c, err)
	}
	seq := publishDecision(t, r.JS, conv, task, `{"approved":true,"by":"ann"}`)
	stillPending(t, b, readPast(t, r, conv, seq), task, "ann")
	publishDecision(t, r.JS, conv, task, `{"approved":true,"by":"bob"}`)
	servetest.Finished(t, r, conv, "done Background tool 'deploy' (task "+task+") completed.\nResult: deployed prod")
	if _, d := b.Counts("prod"); d != 1 {
		t.Fatalf("deploy ran %d times, want 1", d)
	}
}

// The save of a run that took another outcome live (a non-blocking
// external call's answer) moves the conversation's checkpoint past what
// the live read read: the approval it counted for the quorum of the call
// still pending is saved with it (votes [ann]), so that the second
// identity's approval, after the pause, runs the call once.
func TestQuorumLiveVotesSaved(t *testing.T) {
	b := servetest.Setup(t)
	b.Trust = true
	b.NonBlocking = true
	b.Approval = &session.ApprovalPolicy{Required: 2}
	refused := make(chan string, 64)
	r := b.ReplicaWith(t, "r1", servetest.ReplicaOpts{InboxLog: slog.New(reasonSignal{servetest.Logger().Handler(), refused})})
	run, conv, task := startPrompt(t, b, r, "both+ask prod")
	c, err := r.Svc.Get(context.Background(), conv)
	if err != nil {
		t.Fatal(err)
	}
	var ask string
	for _, p := range c.Pending {
		if p.Tool == "ask" {
			ask = p.TaskID
		}
	}
	if ask == "" {
		t.Fatalf("no ask pending in %+v", c)
	}
	publishDecision(t, r.JS, conv, task, `{"approved":true,"by":"ann"}`)
	for range 2 {
		if _, err := r.JS.Publish(context.Background(), "tools.answer."+conv+"."+ask, []byte(`{"content":"asked prod"}`)); err != nil {
			t.Fatal(err)
		}
	}
	refusedFor(t, refused, conversation.ReasonDuplicate, "the second answer refused duplicate by the live read")
	// A live read reads the decisions before the answers: ann's second
	// approval, published now, is read by a later read than the one that
	// took the answer, which handed it to the run first.
	publishDecision(t, r.JS, conv, task, `{"approved":true,"by":"ann"}`)
	refusedFor(t, refused, conversation.ReasonDuplicateIdentity, "ann's second approval refused duplicate_identity by the live read")
	close(b.SlowGate)
	if f := ended(t, run); f.Status != "paused" || len(f.Pending) != 1 || f.Pending[0].TaskID != task {
		t.Fatalf("run: %+v, want paused on the deploy", f)
	}
	st, _, err := r.Convs.Store.Load(context.Background(), conv)
	if err != nil {
		t.Fatal(err)
	}
	stillPending(t, b, st, task, "ann")
	publishDecision(t, r.JS, conv, task, `{"approved":true,"by":"bob"}`)
	servetest.Finished(t, r, conv, "done Background tool 'deploy' (task "+task+") completed.\nResult: deployed prod")
	if _, d := b.Counts("prod"); d != 1 {
		t.Fatalf("deploy ran %d times, want 1", d)
	}
}
