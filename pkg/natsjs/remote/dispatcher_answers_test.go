package remote_test

import (
	"context"
	"log/slog"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/offload-dev/offload/internal/offloadtest"
	"github.com/offload-dev/offload/pkg/metrics"
	"github.com/offload-dev/offload/pkg/natsjs/internal/jstest"
	"github.com/offload-dev/offload/pkg/natsjs/remote"
	"github.com/offload-dev/offload/pkg/protocol"
)

// Only an answer settles an external call (issue 30, finding 4): a result
// on the results subject for an external call waiting for an answer, as a
// worker that knows the task's ID could forge it, is refused live as
// wrong_kind (wrong_conversation under another conversation) and counted;
// once the call no longer waits, the memory of it is gone.
func TestDispatcherRefusesResultsForExternalCalls(t *testing.T) {
	t.Parallel()
	b := setup(t)
	refused := make(refusals, 16)
	d, am := b.dispatcher(t, remote.DispatcherConfig{Logger: slog.New(refused)})
	ctx := context.Background()
	conv := protocol.NewID()
	// The dispatcher knows the conversation (it dispatched to it), as the
	// process of a run does.
	task := jstest.NewTask("job", conv, `{}`)
	h, err := d.Dispatch(ctx, task)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = h.Cancel(ctx, "test over") }()
	ext, other := protocol.NewID(), protocol.NewID()
	d.AwaitAnswers(conv, []string{ext, other})
	d.AwaitAnswers(conv, []string{ext}) // replaces the set: other was answered
	s := protocol.Subjects{}
	expect := func(subject string, reason metrics.RefuseReason, n float64) {
		t.Helper()
		if err := b.nc.Publish(subject, []byte(`{"content":"forged","worker":"rogue"}`)); err != nil {
			t.Fatal(err)
		}
		if got := offloadtest.WaitOrTimeout(t, refused, "a refusal"); got != string(reason) {
			t.Fatalf("%s: refused for %q, want %q", subject, got, reason)
		}
		if got := testutil.ToFloat64(am.RefusedMessagesTotal.WithLabelValues(string(reason))); got != n {
			t.Fatalf("refused{%s} = %v, want %v", reason, got, n)
		}
	}
	expect(s.Result(conv, ext), metrics.RefuseWrongKind, 1)
	expect(s.Result(protocol.NewID(), ext), metrics.RefuseWrongConversation, 1)
	expect(s.Result(conv, other), metrics.RefuseUnknownTask, 1)
	d.AwaitAnswers(conv, nil)
	expect(s.Result(conv, ext), metrics.RefuseUnknownTask, 2)
}
